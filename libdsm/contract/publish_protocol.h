// The steps of the local publish protocol on an AreaControl, shared by writer
// processes (WriterArea), readers (ReaderArea) and dsmd (which publishes
// replicas of remote areas and reads local areas to ship them). The protocol
// itself is described in docs/region-layout.md.
#ifndef DSM_LIBDSM_CONTRACT_PUBLISH_PROTOCOL_H_
#define DSM_LIBDSM_CONTRACT_PUBLISH_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "coherence/line_set.h"
#include "coherence/version_publisher.h"
#include "libdsm/contract/shm_layout.h"

namespace dsm {

// Buffers some reader pins (bit i = buffer i).
uint32_t PinnedBuffers(const AreaControl& area);

// Whether no process but dsmd can read the area's buffers: no reader slot is
// held by a client. dsmd assigns slots at attach, in its own thread, and a
// process pins a buffer only through its slot.
bool OnlyDaemonReads(const AreaControl& area);

// The buffer the next version goes to, or -1 when readers pin every spare
// (counted in publishes_deferred).
int ChoosePublishTarget(AreaControl& area);

// Makes `target`, now holding `version`, the latest version (after its copy).
void CompletePublish(AreaControl& area, uint32_t target, uint64_t version, uint64_t now_ns,
                     size_t bytes_copied);

// After a publish into `latest`: brings the buffer the next version will
// likely go to up to it (VersionPublisher::CatchUp), if no reader holds that
// buffer and it missed little; counts the bytes. `buffers` are the area's
// reader buffers, mapped. A reader pins only the latest buffer (PinLatest
// re-checks `latest`), so a spare found unpinned now stays unpinned until
// the next publish into it; copying what it missed now, after the version
// became visible, takes that copy off the path from a publish to its readers.
void CatchUpNextTarget(AreaControl& area, VersionPublisher& publisher, uint8_t* const* buffers,
                       uint32_t latest);

// Blocks until the `latest` of one of `areas` differs from its `seen` value
// (read before), or `timeout_ns` passes (or a spurious wake-up); one sleep for
// all of them (futex_waitv), so a process waiting for one area's version is
// woken by another's without polling. CompletePublish wakes the waiters. At
// most kMaxVersionWaitAreas areas; the rest are not watched.
inline constexpr size_t kMaxVersionWaitAreas = 128;  // FUTEX_WAITV_MAX
void WaitForNewerVersions(std::span<AreaControl* const> areas, std::span<const uint64_t> seen,
                          uint64_t timeout_ns);

// The stage handshake (stage_layout.h): wakes whoever sleeps on
// stage_state, and sleeps while it still equals `seen` (at most `timeout_ns`).
void WakeStageWaiters(AreaControl& area);
void WaitStageChange(AreaControl& area, uint32_t seen, uint64_t timeout_ns);

// Pins the newest complete version in reader slot `slot`, next to `current`
// (which stays pinned). Returns false if the writer kept replacing it.
bool PinLatest(AreaControl& area, uint32_t slot, uint32_t current, LatestVersion* out);
// Leaves only `current` pinned in the slot (kNoBuffer: nothing).
void SetPin(AreaControl& area, uint32_t slot, uint32_t current);

// In-place versions of a replica (docs/region-layout.md). A reader process
// whose threads are all offline yields the pin of each replica it reads: it
// still maps the buffer but reads nothing. dsmd may then take the latest
// buffer, write the next version into it and publish it there; a reader
// taking its pin back waits for that.
//
// Reader: marks its pin yielded (nothing to do without a mapped buffer).
void YieldPin(AreaControl& area, uint32_t slot);
// Reader: takes a yielded pin back, waiting up to `wait_ns` while dsmd writes
// the buffer in place. Returns false if dsmd still does after that (the
// buffer is half written: the caller must not read it).
bool ReclaimPin(AreaControl& area, uint32_t slot, uint64_t wait_ns);
// Reader, when ReclaimPin gave up: pins instead a buffer other than
// `current` that holds exactly a version (buffer_version nonzero), dropping
// the taken pin. Returns the buffer and its version, or false (no such
// buffer, or dsmd began writing it: try ReclaimPin again).
bool PinExactOther(AreaControl& area, uint32_t slot, uint32_t current, LatestVersion* out);
// dsmd: takes the latest buffer for an in-place write: every reader pinning
// it yielded, and another buffer holds an exact version (for a reader that
// cannot wait, PinExactOther). Returns the buffer, or -1 (nothing taken).
int TakeLatestInPlace(AreaControl& area);
// dsmd: the taken buffer now holds `version`: makes it the latest, gives the
// pins back and wakes their readers.
void EndInPlace(AreaControl& area, uint32_t buffer, uint64_t version, uint64_t now_ns,
                size_t bytes_copied);
// dsmd, before writing into `buffer` (not the latest) on a replica: marks
// it inexact, then checks that no reader pins it (PinExactOther pins such
// buffers). Returns false, leaving it as it was, if one does.
bool MarkForWriting(AreaControl& area, uint32_t buffer);

// Clears the pins of dsmd's reader slots (it pins the version it ships): for
// dsmd when it stops, and for a writer once dsmd is gone without doing so.
void ReleaseDaemonPins(AreaControl& area);

// Writer side of the export protocol: a whole publish runs inside an
// ExportGuard (export_seq odd), and records its lines with ExportChanges before
// CompletePublish. `logs` is the mapped pair of logs.
class ExportGuard {
 public:
  explicit ExportGuard(AreaControl& area) : area_(area) { area_.export_seq.fetch_add(1); }
  ~ExportGuard() { area_.export_seq.fetch_add(1); }
  ExportGuard(const ExportGuard&) = delete;
  ExportGuard& operator=(const ExportGuard&) = delete;

 private:
  AreaControl& area_;
};
void ExportChanges(AreaControl& area, uint64_t* logs, const LineSet& changed, uint64_t version);

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_PUBLISH_PROTOCOL_H_
