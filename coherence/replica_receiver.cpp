#include "coherence/replica_receiver.h"

#include <cstring>

#include "coherence/line_copy.h"

namespace dsm {

using wire::DropReason;

ReplicaReceiver::ReplicaReceiver(size_t area_bytes, uint8_t* staging)
    : lines_((area_bytes + kLineBytes - 1) / kLineBytes), staging_(staging), changed_(area_bytes) {}

bool ReplicaReceiver::SetTarget(uint8_t* staging) {
  if (!changed_.Empty()) return false;
  staging_ = staging;
  forward_ = nullptr;
  holding_ = false;
  return true;
}

bool ReplicaReceiver::Hold() {
  if (!changed_.Empty()) return false;
  forward_ = nullptr;
  holding_ = true;
  held_runs_.clear();
  held_bytes_.clear();
  return true;
}

size_t ReplicaReceiver::ApplyHeld(uint8_t* dst) const {
  const uint8_t* data = held_bytes_.data();
  for (const wire::Run& run : held_runs_) {
    const size_t bytes = size_t{run.line_count} * kLineBytes;
    CopyLinesStreaming(dst + size_t{run.first_line} * kLineBytes, data, bytes);
    data += bytes;
  }
  return held_bytes_.size();
}

void ReplicaReceiver::Spill(uint8_t* target) {
  bytes_written_ += ApplyHeld(target);
  staging_ = target;
  holding_ = false;
  held_runs_.clear();
  held_bytes_.clear();
}

bool ReplicaReceiver::SetForward(uint8_t* forward) {
  if (!changed_.Empty()) return false;
  forward_ = forward;
  return true;
}

ReplicaReceiver::Result ReplicaReceiver::OnData(const wire::Frame& frame, uint64_t now_ns) {
  Result r;
  const wire::Header& h = frame.header;
  const bool full = (h.flags & wire::kFlagFull) != 0;
  // Every run must lie inside the area.
  for (size_t i = 0; i < frame.runs.size(); ++i) {
    const wire::Run run = frame.runs[i];
    if (run.first_line >= lines_ || run.line_count > lines_ - run.first_line) {
      r.drop = DropReason::kOutOfRange;
      return r;
    }
  }
  if (h.version > version_limit_) {
    r.drop = DropReason::kStaleVersion;
    return r;
  }
  if (publish_pending_) {
    r.drop = DropReason::kBusy;  // staging must not change before the local publish
    return r;
  }
  if (has_base_ && h.version <= complete_) {
    r.drop = DropReason::kStaleVersion;
    r.ack_now = true;  // our ack was probably lost: repeat it
    return r;
  }
  if (!full && (!has_base_ || h.base_version > complete_)) {
    r.drop = DropReason::kStaleVersion;  // we lack its base: the sender must learn our state
    r.ack_now = true;
    return r;
  }
  if (h.version < max_applied_ || (assembling_ && h.version < version_)) {
    r.drop = DropReason::kStaleVersion;
    return r;
  }
  // An older transfer of the version assembled (a resend that crossed the
  // newer one, or another host's): the newer one replaced it. Ids increase
  // per sender (serial-number order).
  if (assembling_ && h.version == version_ &&
      static_cast<int32_t>(h.transfer_id - transfer_) < 0) {
    r.drop = DropReason::kStaleVersion;
    return r;
  }
  if (!assembling_ || h.version != version_ || h.transfer_id != transfer_) {
    if (holding_) {
      // What an unfinished transfer left held is dropped: nothing of it was
      // written, and this transfer starts from a version the buffers have.
      held_runs_.clear();
      held_bytes_.clear();
      changed_.Clear();
    }
    assembling_ = true;
    version_ = h.version;
    transfer_ = h.transfer_id;
    frame_count_ = h.frame_count;
    received_count_ = 0;
    received_.assign((frame_count_ + 63) / 64, 0);
  } else if (h.frame_count != frame_count_) {
    r.drop = DropReason::kBadLayout;
    return r;
  }
  uint64_t& word = received_[h.seq / 64];
  const uint64_t bit = uint64_t{1} << (h.seq % 64);
  if (word & bit) {
    r.drop = DropReason::kDuplicate;
    return r;
  }
  const uint8_t* data = frame.line_data.data();
  if (holding_) {
    size_t bytes = 0;
    for (size_t i = 0; i < frame.runs.size(); ++i) {
      held_runs_.push_back(frame.runs[i]);
      bytes += size_t{frame.runs[i].line_count} * kLineBytes;
    }
    held_bytes_.insert(held_bytes_.end(), data, data + bytes);
  }
  for (size_t i = 0; i < frame.runs.size() && !holding_; ++i) {
    const wire::Run run = frame.runs[i];
    const size_t bytes = size_t{run.line_count} * kLineBytes;
    // Streaming stores, single lines too (LineStores::kStreaming): the
    // version's publish fences them (PublishInPlace).
    CopyLinesStreaming(staging_ + size_t{run.first_line} * kLineBytes, data, bytes);
    if (forward_ != nullptr) {
      CopyLinesStreaming(forward_ + size_t{run.first_line} * kLineBytes, data, bytes);
    }
    data += bytes;
    bytes_written_ += bytes;
  }
  changed_.AddRunsInOrder(frame.runs);
  if (h.version > max_applied_) max_applied_ = h.version;
  word |= bit;
  last_frame_ns_ = now_ns;
  if (++received_count_ == frame_count_) {
    assembling_ = false;
    complete_ = version_;
    has_base_ = true;
    publish_pending_ = true;
    r.completed = true;
    r.ack_now = true;
  }
  return r;
}

void ReplicaReceiver::Published() {
  publish_pending_ = false;
  changed_.Clear();
  bytes_written_ = 0;
  held_runs_.clear();
  held_bytes_.clear();
}

void ReplicaReceiver::Reset() {
  if (publish_pending_) return;
  has_base_ = false;
  complete_ = 0;
  max_applied_ = 0;
  assembling_ = false;
  received_count_ = 0;
  // Lines already staged stay marked: the whole-area transfer that follows
  // overwrites them, and the staging target does not move meanwhile.
}

size_t ReplicaReceiver::MissingRanges(wire::SeqRange* out, size_t max) const {
  if (!assembling_) return 0;
  size_t n = 0;
  uint32_t seq = 0;
  while (seq < frame_count_ && n < max) {
    if (received_[seq / 64] & (uint64_t{1} << (seq % 64))) {
      ++seq;
      continue;
    }
    const uint32_t first = seq;
    while (seq < frame_count_ && !(received_[seq / 64] & (uint64_t{1} << (seq % 64)))) ++seq;
    out[n++] = {first, seq - first};
  }
  return n;
}

}  // namespace dsm
