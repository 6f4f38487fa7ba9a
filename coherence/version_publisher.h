// How a writer turns its change log into a new version of an area's reader
// copies. Each host keeps 2..4 reader buffers per area; readers map the latest
// one and pin it while they use it. A new version is written into a buffer that
// is neither the latest nor pinned, so no reader ever sees a buffer change under
// it. A buffer that missed earlier versions catches up in the same copy: each
// buffer carries a "pending" set of lines changed since its own version.
#ifndef DSM_COHERENCE_VERSION_PUBLISHER_H_
#define DSM_COHERENCE_VERSION_PUBLISHER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "coherence/change_log.h"
#include "coherence/line_set.h"
#include "coherence/staged_lines.h"

namespace dsm {

// The "latest" word of an area: version and buffer index in one atomic 64 bits.
// Versions must stay below 2^56.
struct LatestVersion {
  uint64_t version;
  uint32_t buffer;
};
inline constexpr uint64_t PackLatest(uint64_t version, uint32_t buffer) {
  return (version << 8) | (buffer & 0xff);
}
inline constexpr LatestVersion UnpackLatest(uint64_t word) {
  return {word >> 8, static_cast<uint32_t>(word & 0xff)};
}

// A buffer is caught up ahead of its next version (CatchUp) if it missed at
// most 1/this of the area's lines, or if the last version wrote at most that
// share: versions that rewrite more likely rewrite most of what a catch-up
// would copy, so that copy would be made twice. Versions sparser than that
// (a managed area's, a sparse update's) leave most of it in place, and the
// copy is better made before the next version than in its publish, where
// the readers wait for it.
inline constexpr size_t kCatchUpMaxShare = 4;

// Picks the buffer the next version goes to: not `latest`, not in `pinned_mask`
// (bit i = some reader holds buffer i). Returns -1 when every spare is pinned.
// Prefers the buffer after `latest` in round-robin order, so buffers age evenly.
int PickTargetBuffer(uint32_t buffer_count, uint32_t latest, uint32_t pinned_mask);

class VersionPublisher {
 public:
  // `stores`: how copies into the buffers store their lines (line_copy.h).
  VersionPublisher(size_t area_bytes, uint32_t buffer_count,
                   LineStores stores = LineStores::kByRunLength);

  // Writes the next version into buffer `target`: copies the lines marked in
  // `dirty` plus those `target` missed, from the writer copy `src` into `dst`
  // (the target buffer's memory; both rounded up to whole lines). `dirty` is
  // drained, every other buffer remembers its lines as pending, and `changed`
  // (if given) receives them too. Returns the bytes copied.
  size_t Publish(ChangeLog& dirty, uint32_t target, const uint8_t* src, uint8_t* dst,
                 LineSet* changed = nullptr);
  // The same for changes already gathered in a LineSet (a replica's daemon).
  size_t PublishLines(const LineSet& dirty, uint32_t target, const uint8_t* src, uint8_t* dst);

  // For a version written straight into buffer `target` (a replica's daemon
  // receives frames into the buffer that will hold the next version): `written`
  // are the lines written there since the last publish. Copies what `target`
  // lacks besides those from `latest` (the latest version's buffer; area
  // memory, rounded up to whole lines) into `dst`, then does Publish's
  // bookkeeping. Lines in `written` must hold the new version's content
  // (ReplicaReceiver: lines of an abandoned transfer do). `forward` (if not
  // -1): a spare written the same lines as `target` (ReplicaReceiver's
  // forward copies), which then lacks them no longer. Ends with a
  // StoreFence(), covering streaming stores the caller made into `dst` (and
  // `forward`) too. Returns the bytes copied.
  size_t PublishInPlace(const LineSet& written, uint32_t target, const uint8_t* latest,
                        uint8_t* dst, int forward = -1) {
    const size_t copied = CopyLacking(written, target, latest, dst);
    RecordPublished(written, target, forward);
    return copied;
  }
  // PublishInPlace in two halves, so that the version can be made visible
  // in between: what must be in `dst` first (the copy and the fence), then
  // the bookkeeping of what the other buffers lack, which readers do not
  // wait for.
  size_t CopyLacking(const LineSet& written, uint32_t target, const uint8_t* latest, uint8_t* dst);
  void RecordPublished(const LineSet& written, uint32_t target, int forward = -1);

  // Brings buffer `target` (neither latest nor pinned, nothing written into
  // it since the last publish) up to the latest version, from `latest`, ahead
  // of the next PublishInPlace into it: done while the host waits for the next
  // version, that copy is off its path. Returns the bytes copied. Streaming
  // stores (LineStores::kStreaming): nothing reads those lines before the
  // next publish, and meanwhile the copy competes with dsmd for the cores.
  // Measured on the 2-host memif bench, 64 MiB, 1% of lines: the writer's
  // dsm_publish with its catch-up 1.14 -> 0.92 ms (medians of 5 runs).
  size_t CatchUp(uint32_t target, const uint8_t* latest, uint8_t* dst) {
    return CopyPending(target, latest, dst, LineStores::kStreaming);
  }
  // Whether CatchUp of `target` is worth making now (kCatchUpMaxShare).
  bool CatchUpWorthwhile(uint32_t target) const;
  // Lines the last publish wrote as its version's own (not catch-ups).
  size_t last_version_lines() const { return last_version_lines_; }

  // For a version a writer handed over in a stage (staged_lines.h): writes
  // it into buffer `target`, its lines from `bytes`, what `target` missed of
  // earlier versions from `latest` (as PublishInPlace). Plain stores for the
  // version's lines: dsmd frames them from `target` next. Returns the bytes
  // copied; last_written() holds the version's lines until the next publish.
  size_t PublishRuns(std::span<const LineRun> runs, const uint8_t* bytes, uint32_t target,
                     const uint8_t* latest, uint8_t* dst);
  const LineSet& last_written() const { return written_; }
  // For a staged version nothing but the caller can read meanwhile (dsmd's
  // StageApplier, no reader on its host): writes its lines into `target`,
  // the latest buffer, in place (it lacks nothing else). The other buffers
  // learn nothing line by line: they lack the whole area from then on, and
  // their next publish copies it from the latest buffer (after a reader
  // attached). Returns the bytes copied; last_written() is not kept.
  size_t PublishRunsInPlace(std::span<const LineRun> runs, const uint8_t* bytes, uint32_t target,
                            uint8_t* dst);
  // Forgets what each buffer holds: every line pending everywhere (the next
  // publish into a buffer copies the whole area). For a writer taking the
  // buffers back from a dsmd that is gone.
  void MarkAllPending();

  size_t area_bytes() const { return area_bytes_; }
  uint32_t buffer_count() const { return static_cast<uint32_t>(pending_.size()); }
  const LineSet& pending(uint32_t buffer) const { return pending_[buffer]; }

 private:
  // Copies what `target` lacks from src to dst and forgets it.
  size_t CopyPending(uint32_t target, const uint8_t* src, uint8_t* dst, LineStores stores);

  size_t area_bytes_;
  LineStores stores_;
  std::vector<LineSet> pending_;
  // Per buffer: its pending set is the whole area (PublishRunsInPlace), so
  // nothing needs adding to it.
  std::vector<bool> lacks_all_;
  LineSet written_;  // PublishRuns: the version's lines
  size_t last_version_lines_ = 0;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_VERSION_PUBLISHER_H_
