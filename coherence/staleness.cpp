#include "coherence/staleness.h"

namespace dsm {

Staleness ComputeStaleness(const StalenessInput& in) {
  const uint64_t since =
      in.seen_version >= in.latest_version ? in.confirmed_ns : in.superseded_ns;
  const uint64_t lag = in.now_ns > since ? in.now_ns - since : 0;
  return {lag, !in.writer_alive || lag > in.bound_ns};
}

}  // namespace dsm
