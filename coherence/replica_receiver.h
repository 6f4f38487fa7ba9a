// The receiving side of one replicated area on a reader host: assembles DATA
// transfers into the staging copy and reports complete versions. Pure logic:
// the daemon passes the frames and publishes completed versions locally.
//
// Rules (docs/design.md, "Remote sync"): a transfer (base -> version) applies
// when base <= the last complete version (or it carries the whole area) and its
// version is not older than anything applied before. Lines of an abandoned,
// incomplete transfer may sit in the staging copy; every later acceptable
// transfer covers them, so a completed version is always exact.
#ifndef DSM_COHERENCE_REPLICA_RECEIVER_H_
#define DSM_COHERENCE_REPLICA_RECEIVER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/wire_format.h"

namespace dsm {

class ReplicaReceiver {
 public:
  // `staging`: where accepted lines go (rounded up to whole lines): a staging
  // copy, or straight the buffer that will hold the next version (SetTarget).
  ReplicaReceiver(size_t area_bytes, uint8_t* staging);

  // Sends accepted lines to `staging` from now on. Only between versions: no
  // line staged since the last Published() (else ignored, returns false).
  // Ends forward copies (SetForward).
  bool SetTarget(uint8_t* staging);
  const uint8_t* target() const { return staging_; }
  // Copies accepted lines to `forward` too, from now on until SetTarget:
  // the spare the version after this one will go to, written while the
  // lines are in this core's cache rather than read back from the target
  // in that version's catch-up. Only between versions, as SetTarget.
  bool SetForward(uint8_t* forward);
  const uint8_t* forward() const { return forward_; }

  // Holds accepted lines (their bytes, in order) instead of writing them
  // anywhere, from now on until SetTarget or Spill: the completed version
  // then goes in one short write (ApplyHeld), in place into the buffer
  // readers map while they wait. Only between versions, as SetTarget.
  bool Hold();
  bool holding() const { return holding_; }
  // Line bytes held.
  size_t held_bytes() const { return held_bytes_.size(); }
  // Writes the held lines into `dst` in the order they came (streaming
  // stores, not fenced); returns their bytes. They stay held.
  size_t ApplyHeld(uint8_t* dst) const;
  // Writes the held lines into `target` and sends later lines there
  // (SetTarget), for a version too large to hold.
  void Spill(uint8_t* target);

  struct Result {
    wire::DropReason drop = wire::DropReason::kNone;
    bool completed = false;  // a version became complete: publish it locally
    bool ack_now = false;    // tell the sender where we are
  };
  // Takes one validated DATA frame of this area.
  Result OnData(const wire::Frame& frame, uint64_t now_ns);

  // The completed version was published locally; new transfers may apply.
  void Published();
  // Forgets every version seen and what is assembled (not a pending
  // publish): the next transfer must carry the whole area, at any version
  // (the writer ships its collected version, which may be older than what
  // its host lists as latest).
  void Reset();
  bool publish_pending() const { return publish_pending_; }
  // Lines staged (or held) since the last local publish.
  const LineSet& changed() const { return changed_; }
  // Line bytes written since the last local publish (a line written by two
  // transfers counts twice).
  size_t bytes_written() const { return bytes_written_; }

  uint64_t complete_version() const { return complete_; }
  bool has_base() const { return has_base_; }
  // The transfer being assembled, if any, and what it still lacks.
  bool assembling() const { return assembling_; }
  uint64_t assembling_version() const { return assembling_ ? version_ : 0; }
  uint32_t assembling_transfer() const { return assembling_ ? transfer_ : 0; }
  size_t MissingRanges(wire::SeqRange* out, size_t max) const;
  // Frames of the assembled transfer, and whether frame `seq` of it arrived.
  uint32_t frame_count() const { return assembling_ ? frame_count_ : 0; }
  bool received(uint32_t seq) const {
    return assembling_ && seq < frame_count_ && (received_[seq / 64] >> (seq % 64) & 1) != 0;
  }
  uint64_t last_frame_ns() const { return last_frame_ns_; }

  // Versions above this are refused (kStaleVersion): what the writer's host
  // advertises plus a margin, so one forged frame cannot pin the replica.
  void set_version_limit(uint64_t limit) { version_limit_ = limit; }

 private:
  size_t lines_;
  uint8_t* staging_;
  uint8_t* forward_ = nullptr;
  LineSet changed_;
  size_t bytes_written_ = 0;
  bool has_base_ = false;  // complete_ holds a real version
  uint64_t complete_ = 0;
  uint64_t max_applied_ = 0;
  bool publish_pending_ = false;
  bool assembling_ = false;
  uint64_t version_ = 0;
  uint32_t transfer_ = 0;
  uint32_t frame_count_ = 0;
  uint32_t received_count_ = 0;
  std::vector<uint64_t> received_;  // bit per seq
  uint64_t last_frame_ns_ = 0;
  uint64_t version_limit_ = UINT64_MAX;
  // Hold(): the accepted runs and their bytes, back to back.
  bool holding_ = false;
  std::vector<wire::Run> held_runs_;
  std::vector<uint8_t> held_bytes_;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_REPLICA_RECEIVER_H_
