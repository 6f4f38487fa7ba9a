// Staleness as a reader reports it: how long what it sees may lag the writer.
// Pure arithmetic on timestamps the caller passes in (monotonic nanoseconds).
#ifndef DSM_COHERENCE_STALENESS_H_
#define DSM_COHERENCE_STALENESS_H_

#include <cstdint>

namespace dsm {

struct StalenessInput {
  uint64_t now_ns;
  uint64_t seen_version;       // version this reader sees
  uint64_t latest_version;     // newest complete version on the host
  uint64_t confirmed_ns;       // when the writer last confirmed `latest` is its state
  // Once a newer version exists: a time no later than when `seen` stopped
  // being the newest (libdsm passes when `seen` itself was published, which
  // over-states the lag, never under-states it).
  uint64_t superseded_ns;
  uint64_t bound_ns;
  bool writer_alive;
};

struct Staleness {
  uint64_t staleness_ns;
  bool stale;
};

// A reader on the latest version lags by the time since the writer's last
// confirmation; a reader behind it lags at least since its version was replaced.
// With the writer gone nothing bounds the lag, so the area is always stale.
Staleness ComputeStaleness(const StalenessInput& in);

}  // namespace dsm

#endif  // DSM_COHERENCE_STALENESS_H_
