// The host control segment: one shared-memory block that dsmd creates and every
// client maps read-write. It holds the host's directory of areas and, per area,
// the atomic words of the local publish protocol (docs/region-layout.md).
// Both dsmd and libdsm include this file; the layout version guards mismatches.
#ifndef DSM_LIBDSM_CONTRACT_SHM_LAYOUT_H_
#define DSM_LIBDSM_CONTRACT_SHM_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "coherence/constants.h"
#include "libdsm/contract/daemon_state.h"
#include "libdsm/contract/region_limits.h"

namespace dsm {

inline constexpr uint64_t kControlMagic = 0x4d53442d4c54434eULL;  // "NCTL-DSM"
inline constexpr uint32_t kLayoutVersion = 21;
inline constexpr uint32_t kNoBuffer = 0xff;
// A reader's pin word: the buffer it maps (low byte) and the one it is moving to
// (second byte); kNoBuffer in a byte pins nothing.
inline constexpr uint32_t PinWord(uint32_t current, uint32_t next) {
  return (current & 0xff) | ((next & 0xff) << 8);
}
inline constexpr uint32_t kNoPins = PinWord(kNoBuffer, kNoBuffer);
// Flags of a pin word (replicas; region-layout.md, "In-place versions"): the
// reader's process reads nothing now (every thread offline), so dsmd may write
// the buffer it maps in place; and dsmd does so now (the reader waits for it
// to end before it reads again).
inline constexpr uint32_t kPinYielded = 1u << 16;
inline constexpr uint32_t kPinTaken = 1u << 17;
// dsmd's own id where a client id is expected (its reader slots, replicas' writer).
inline constexpr uint32_t kDaemonClientId = 0xffffffffu;

enum class AreaState : uint32_t {
  kFree = 0,    // slot unused
  kLive = 1,    // writer running
  kSealed = 2,  // writer process gone: last version stays readable
  kFreed = 3,   // writer freed it: gone from the directory, readers keep their copy
};

enum class BackingKind : uint32_t { kMemfd = 1, kHugetlbfs = 2 };

// Per-area control block. Fields above `latest` are written by dsmd before the
// area's state becomes kLive (release) and never change afterwards.
struct alignas(64) AreaControl {
  std::atomic<uint32_t> state;
  uint32_t generation;  // bumped each time this slot is reused
  char name[kMaxNameBytes];
  uint64_t addr;         // fixed address in every process
  uint64_t size;         // bytes the user asked for
  uint64_t mapped_size;  // size rounded up to the backing page
  int32_t writer_pid;
  uint32_t writer_client;  // dsmd's id for the writer's connection
  uint32_t owner_host;
  uint32_t buffer_count;
  uint64_t sync_interval_ns;
  uint64_t staleness_bound_ns;
  uint64_t writer_offset;  // writer copy (a replica: the daemon's staging copy)
  uint64_t buffer_offset[kMaxReaderBuffers];
  // Where the area comes from: this host's own process, or (is_replica) an area
  // of origin_host that dsmd replicates here and publishes locally.
  uint32_t origin_host;
  uint32_t origin_index;
  uint32_t origin_generation;
  uint32_t is_replica;
  // Two export logs (one uint64 line mask per page each) through which the
  // writer tells dsmd what each version changed, for shipping to other hosts.
  uint64_t export_offset;
  uint64_t export_pages;  // masks per log (0: no export logs, as on replicas)
  uint64_t export_bytes;  // both logs, rounded up to the backing page
  // The stage through which the writer hands its versions to dsmd
  // (stage_layout.h): only for areas whose writer logs explicitly.
  uint64_t stage_offset;  // 0: none, the writer publishes into the buffers itself
  uint64_t stage_bytes;
  uint64_t backing_bytes;  // everything the area holds in the backing, from writer_offset
  // A managed area (dsm_alloc_managed): its versions reach other hosts within
  // this budget; 0: not managed. A replica has its origin's.
  uint64_t managed_budget_bytes_per_s;
  uint32_t managed_max_line_age;
  uint32_t managed_element;  // dsm_element

  // The publish protocol. `latest` = PackLatest(version, buffer) of the newest
  // complete version. A reader pins a buffer in its slot before using it and
  // re-checks `latest`; the writer reads all pins after its own store to
  // `latest`. All four accesses are sequentially consistent (hazard pointers).
  alignas(64) std::atomic<uint64_t> latest;
  std::atomic<uint64_t> confirmed_ns;  // writer was quiescent and `latest` was its state
  // The version each buffer was last published with. On a replica a nonzero
  // value also means the buffer holds exactly that version: dsmd zeroes it
  // (then re-reads the pins) before it writes into the buffer.
  std::atomic<uint64_t> buffer_version[kMaxReaderBuffers];
  std::atomic<uint64_t> buffer_published_ns[kMaxReaderBuffers];

  // Export protocol (writer process -> dsmd): every publish makes export_seq
  // odd, and, once export_enabled, ORs its lines into log[export_index] and
  // records export_version[export_index]; it stores `latest` and only then makes
  // export_seq even. dsmd flips export_index, waits for an even export_seq
  // (every version in the old log is then complete, and no publish that missed
  // export_enabled is still running) and reads the old log at leisure.
  alignas(64) std::atomic<uint32_t> export_enabled;
  std::atomic<uint32_t> export_index;
  std::atomic<uint64_t> export_seq;
  std::atomic<uint64_t> export_version[2];
  // dsmd: the newest version every subscribed host acknowledged (ReplicaSender::
  // MinAcked). A writer freeing an exported area waits (bounded) for its last
  // version here before the area stops being shipped.
  std::atomic<uint64_t> remote_acked_version;
  // Set by a writer whose publish found every spare buffer pinned: dsmd, which
  // may be pinning one to ship it, then copies that version aside and unpins.
  std::atomic<uint32_t> spare_wanted;

  // The stage's handshake (StageState, stage_layout.h). The words after it
  // describe the posted version: the writer stores them before kPosted
  // (release), dsmd reads them after it sees kPosted (acquire). The writer
  // sleeps on stage_state (futex) and dsmd wakes it after changing it.
  alignas(64) std::atomic<uint32_t> stage_state;
  uint32_t stage_kind;  // StageKind
  uint64_t stage_version;
  uint64_t stage_runs;
  uint64_t stage_lines;
  uint64_t stage_posted_ns;  // the writer's monotonic clock as it posted
  // dsmd found every spare buffer pinned by readers: the posted version
  // waits (the writer's publish says busy rather than wait for readers).
  std::atomic<uint32_t> stage_blocked;
  // Set by a writer waiting for the stage to post its next version: dsmd,
  // which may hold it to frame from it (kHeld), then lets it go.
  std::atomic<uint32_t> stage_wanted;

  // A managed area's changed lines that its writer's dsmd has not sent yet,
  // and how many versions the oldest of them lags (dsmd writes them; on a
  // replica, as the origin's listing said). While lines wait, the writer
  // publishes versions that change nothing, so that they can go.
  alignas(64) std::atomic<uint64_t> managed_residual_lines;
  std::atomic<uint64_t> managed_oldest_lag;
  // The version those two are as of (stored after them, release).
  std::atomic<uint64_t> managed_residual_version;

  // Counters for status and dsmctl (written by the writer process).
  alignas(64) std::atomic<uint64_t> publishes;
  std::atomic<uint64_t> publishes_deferred;
  std::atomic<uint64_t> bytes_published;
  // Of those, copied into a spare buffer after a publish, ahead of its next
  // version (VersionPublisher::CatchUp), off the path to the readers.
  std::atomic<uint64_t> bytes_caught_up;
  // Of `publishes`: versions dsmd wrote from the stage (it counts them).
  std::atomic<uint64_t> staged_publishes;
  // Of those, written in place into the latest buffer: no process on this
  // host could read it meanwhile (StageApplier).
  std::atomic<uint64_t> staged_in_place;
  // Of `staged_publishes`: posted while dsmd was already looking for them
  // (PostForecast), so the writer did not ring the doorbell.
  std::atomic<uint64_t> staged_forecast_hits;
  std::atomic<uint64_t> publish_ns_total;
  std::atomic<uint64_t> publish_ns_max;
  // Page tracking (dsm_alloc_opts.tracking): set by the writer after mapping.
  std::atomic<uint32_t> tracking;      // dsm_tracking
  std::atomic<uint32_t> page_tracker;  // dsm_page_tracker in use
  std::atomic<uint64_t> pages_written;  // reported by the tracker, in 4 KiB pages
  std::atomic<uint64_t> lines_changed;  // of those, lines that differed from the last version

  // Reader slots: dsmd assigns reader_client (0 = free) at attach and clears it
  // when the reader leaves; the reader alone writes its pin.
  alignas(64) std::atomic<uint32_t> reader_pin[kMaxReadersPerArea];
  std::atomic<uint32_t> reader_client[kMaxReadersPerArea];

  // Threads of any process blocked (futex on the low half of `latest`) until a
  // newer version; whoever stores `latest` wakes them only if this is nonzero.
  alignas(64) std::atomic<uint32_t> version_waiters;
  // A replica's latest buffer being written in place: buffer + 1 (0: none).
  // Readers pinning the latest buffer wait while it names that buffer (futex).
  std::atomic<uint32_t> in_place_buffer;
};

struct alignas(64) ControlHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t host_id;
  uint64_t region_base;
  uint64_t region_bytes;
  uint64_t slice_base;  // this host's slice of the region
  uint64_t slice_bytes;
  uint64_t backing_bytes;
  uint64_t backing_page_bytes;
  BackingKind backing_kind;
  int32_t daemon_pid;
  std::atomic<uint32_t> daemon_alive;
  uint64_t default_sync_interval_ns;
  uint64_t default_staleness_bound_ns;
  uint32_t cluster_hosts;  // 0: this host runs alone
  uint32_t reserved;
  // Of backing_bytes, what areas and replicas hold now (dsmd updates it).
  std::atomic<uint64_t> backing_used_bytes;
  HostInfo hosts[kMaxHosts];
  RemoteCounters remote;
  // The doorbell (an eventfd dsmd passes at hello): dsmd sets this to 1 before
  // it sleeps; a writer that completed a publish of an exported area rings the
  // doorbell only if it takes the 1 (exchange), so a writer publishing at a high
  // rate pays one write() per daemon sleep, not one per publish.
  std::atomic<uint32_t> doorbell_armed;
};

struct ControlSegment {
  ControlHeader header;
  AreaControl areas[kMaxAreas];
  StageTimeline timeline;  // dsmd's per-version stage marks (daemon_state.h)
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics need lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "cross-process atomics need lock-free");

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_SHM_LAYOUT_H_
