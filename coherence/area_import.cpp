#include "coherence/area_import.h"

#include <algorithm>

#include "coherence/line_copy.h"

namespace dsm {

AreaImport::AreaImport(size_t area_bytes, uint32_t buffer_count, const SyncParams& params,
                       ImportHost* host, ImportCounters* counters)
    : params_(params),
      host_(host),
      counters_(counters),
      receiver_(area_bytes, host->Buffer(-1)),
      publisher_(area_bytes, buffer_count, LineStores::kStreaming) {
  Aim(false);
}

void AreaImport::Aim(bool catch_up) {
  if (host_->InPlaceCapable()) {
    // Held until complete: no spare is chosen (nor written) before then.
    if (receiver_.Hold()) {
      target_ = -1;
      forward_ = -1;
    }
    return;
  }
  const int buffer = host_->SpareForNextVersion();
  uint8_t* dst = host_->Buffer(buffer);
  if (!receiver_.SetTarget(dst)) return;
  target_ = buffer;
  forward_ = -1;
  // Nothing of the next version is in it yet: what it missed of the earlier
  // ones can be copied now rather than when that version completes.
  if (buffer >= 0 && catch_up && publisher_.CatchUpWorthwhile(static_cast<uint32_t>(buffer))) {
    const uint8_t* latest = host_->Buffer(static_cast<int>(host_->Latest()));
    host_->CaughtUp(publisher_.CatchUp(static_cast<uint32_t>(buffer), latest, dst));
  }
}

void AreaImport::Spill() {
  const int buffer = host_->SpareForNextVersion();
  receiver_.Spill(host_->Buffer(buffer));
  target_ = buffer;
  forward_ = -1;
}

void AreaImport::AimForward() {
  const int forward = host_->SpareBesides(target_);
  if (forward >= 0 && receiver_.SetForward(host_->Buffer(forward))) forward_ = forward;
}

wire::DropReason AreaImport::OnData(const wire::Frame& frame, uint64_t now_ns) {
  // The first line of a version goes straight to a reader buffer if one is
  // free by now (local readers move off the previous version as soon as it
  // is out).
  if (target_ < 0 && receiver_.changed().Empty()) Aim(false);
  // A version too large to hold goes to a spare: judged by its first frame
  // (frames of a transfer are about equally full), or once it outgrows it.
  // (Not for a frame that will be dropped: a version waiting to publish, or
  // an old one.)
  if (receiver_.holding() && !receiver_.publish_pending() &&
      !(receiver_.has_base() && frame.header.version <= receiver_.complete_version())) {
    const size_t bytes = frame.line_data.size();
    const size_t held = receiver_.held_bytes();
    if (held + bytes > params_.hold_max_bytes ||
        (held == 0 && size_t{frame.header.frame_count} * bytes > params_.hold_max_bytes)) {
      Spill();
    }
  }
  if (target_ >= 0 && forward_ < 0 && receiver_.changed().Empty()) AimForward();
  const ReplicaReceiver::Result res = receiver_.OnData(frame, now_ns);
  if (res.drop == wire::DropReason::kNone) {
    progress_ns_ = now_ns;
    progress_started_ = true;
    if (marks_ && frame.header.version > first_frame_marked_) {
      first_frame_marked_ = frame.header.version;
      origin_host_ = frame.header.source_host;
      marks_->Mark(Stage::kFirstFrame, frame.header.version, origin_host_, marks_->NowNs());
    }
  }
  if (res.completed) {
    ++counters_->versions_received;
    idle_reacks_ = 0;
    if (marks_) {
      marks_->Mark(Stage::kAssembled, receiver_.complete_version(), origin_host_, marks_->NowNs());
    }
    SendAck(now_ns, /*every_missing=*/false);  // first: the sender may move on while we copy locally
    Publish(now_ns);
  } else if (res.ack_now && now_ns - last_ack_ns_ >= params_.ack_min_gap_ns) {
    // Frames we cannot use (another host's transfer, an old version) each
    // ask for an ack; one per gap is enough to tell the sender where we are.
    SendAck(now_ns, /*every_missing=*/false);
  }
  return res.drop;
}

bool AreaImport::PublishHeld(uint64_t now_ns) {
  const LineSet& written = receiver_.changed();
  const uint64_t version = receiver_.complete_version();
  if (host_->BeginInPlace()) {
    // Every local reader of the latest buffer waits: the version goes there.
    const uint32_t latest = host_->Latest();
    const size_t bytes = receiver_.ApplyHeld(host_->Buffer(static_cast<int>(latest)));
    StoreFence();
    host_->EndInPlace(version, bytes, now_ns);
    publisher_.RecordPublished(written, latest);
    ++counters_->versions_written_in_place;
  } else {
    const int target = host_->SpareToPublish();
    if (target < 0) return false;  // local readers hold every spare buffer
    uint8_t* dst = host_->Buffer(target);
    size_t bytes = receiver_.ApplyHeld(dst);
    const uint8_t* latest = host_->Buffer(static_cast<int>(host_->Latest()));
    bytes += publisher_.CopyLacking(written, static_cast<uint32_t>(target), latest, dst);
    host_->Publish(static_cast<uint32_t>(target), version, bytes, now_ns);
    publisher_.RecordPublished(written, static_cast<uint32_t>(target));
  }
  if (marks_) marks_->Mark(Stage::kPublished, version, origin_host_, marks_->NowNs());
  receiver_.Published();
  published_ns_ = now_ns;
  Aim(false);
  return true;
}

bool AreaImport::Publish(uint64_t now_ns) {
  if (receiver_.holding()) return PublishHeld(now_ns);
  const int target = target_ >= 0 ? target_ : host_->SpareToPublish();
  if (target < 0) return false;  // local readers hold every spare buffer
  const LineSet& written = receiver_.changed();
  uint8_t* dst = host_->Buffer(target);
  size_t bytes = 0;
  if (target_ < 0) {  // staged: copy the new lines over
    const uint8_t* staging = host_->Buffer(-1);
    written.ForEachPage([&](size_t page, uint64_t mask) {
      bytes += CopyPageLines(page, mask, staging, dst, LineStores::kStreaming);
    });
  } else {
    ++counters_->versions_received_in_place;
    if (forward_ >= 0) ++counters_->versions_received_forward;
  }
  // What the target missed of earlier versions comes from the latest one.
  const uint8_t* latest = host_->Buffer(static_cast<int>(host_->Latest()));
  bytes += publisher_.CopyLacking(written, static_cast<uint32_t>(target), latest, dst);
  // Received in place: the version's own lines were written by the frames.
  if (target_ >= 0) bytes += receiver_.bytes_written();
  host_->Publish(static_cast<uint32_t>(target), receiver_.complete_version(), bytes, now_ns);
  // Readers have it: now what the other buffers lack of it.
  publisher_.RecordPublished(written, static_cast<uint32_t>(target), target_ >= 0 ? forward_ : -1);
  if (marks_) {
    marks_->Mark(Stage::kPublished, receiver_.complete_version(), origin_host_, marks_->NowNs());
  }
  receiver_.Published();
  published_ns_ = now_ns;
  // Not aimed at a spare yet: right now local readers still hold the version
  // before, and with two buffers that is the only spare. The next frame, or
  // the next turn, aims again.
  receiver_.SetTarget(host_->Buffer(-1));
  target_ = -1;
  forward_ = -1;
  return true;
}

void AreaImport::SendAck(uint64_t now_ns, bool every_missing) {
  // A NACK lists every missing range (up to nack_max_ranges), a frame's
  // worth per ACK; other acks one frame's worth.
  missing_.resize(every_missing ? std::max<size_t>(1, params_.nack_max_ranges)
                                : wire::kMaxMissingRanges);
  const size_t n = receiver_.MissingRanges(missing_.data(), missing_.size());
  AckReport ack;
  ack.complete_version = receiver_.complete_version();
  ack.holds_nothing = !receiver_.has_base();
  ack.assembling_version = receiver_.assembling_version();
  ack.transfer_id = receiver_.assembling_transfer();
  size_t done = 0;
  do {
    const size_t k = std::min(n - done, wire::kMaxMissingRanges);
    ack.missing = std::span<const wire::SeqRange>(missing_.data() + done, k);
    host_->SendAck(ack);
    ++counters_->acks_out;
    done += k;
  } while (done < n);
  last_ack_ns_ = now_ns;
  // The resends come in ascending order: the last one asked for ends their pass.
  if (every_missing) {
    pass_open_ = n > 0;
    if (n > 0) pass_last_seq_ = missing_[n - 1].first + missing_[n - 1].count - 1;
  }
}

void AreaImport::OnWriterLatest(uint64_t latest, uint64_t now_ns) {
  // Heard again after a silence (a cut, a restart): the stall clock starts
  // now, as frames could not have come meanwhile.
  if (!writer_latest_known_ || now_ns - writer_latest_ns_ > params_.resync_after_ns / 4) {
    heard_since_ns_ = now_ns;
  }
  writer_latest_ = latest;
  writer_latest_ns_ = now_ns;
  writer_latest_known_ = true;
}

bool AreaImport::Stuck(uint64_t now_ns) const {
  // Only against a recent listing: a writer's host that fell silent is
  // judged by membership, not here.
  if (!writer_latest_known_ || now_ns - writer_latest_ns_ > params_.resync_after_ns) return false;
  if (receiver_.has_base() && receiver_.complete_version() == writer_latest_) return false;
  return now_ns - std::max(progress_ns_, heard_since_ns_) > params_.resync_after_ns;
}

void AreaImport::Resync(uint64_t now_ns) {
  receiver_.Reset();
  pass_open_ = false;
  pass_transfer_ = 0;
  pass_version_ = 0;
  progress_ns_ = now_ns;
  ++counters_->resyncs;
  SendAck(now_ns, /*every_missing=*/false);  // holds nothing: the whole area comes
}

bool AreaImport::Turn(uint64_t now_ns) {
  if (!progress_started_) {
    progress_started_ = true;
    progress_ns_ = now_ns;
  }
  if (receiver_.publish_pending()) {
    progress_ns_ = now_ns;  // waiting for local readers, not stuck
    return Publish(now_ns);
  }
  if (Stuck(now_ns)) {
    Resync(now_ns);
    return true;
  }
  // Quiet, assembling nothing: the last ACK may have been lost. Repeated
  // every reack_after_ns while the writer's host lists a newer version, else
  // idle_reacks times after a completion at doubling gaps.
  if (!receiver_.assembling() && receiver_.has_base()) {
    const bool behind = writer_latest_known_ && writer_latest_ > receiver_.complete_version();
    const uint64_t quiet = now_ns - std::max(progress_ns_, last_ack_ns_);
    if (behind ? quiet > params_.reack_after_ns
               : idle_reacks_ < params_.idle_reacks &&
                     quiet > (params_.reack_after_ns << idle_reacks_)) {
      if (!behind) ++idle_reacks_;
      SendAck(now_ns, /*every_missing=*/false);  // where we are, again
      return true;
    }
  }
  // Received into the staging copy for want of a free buffer: look again.
  if (target_ < 0 && !receiver_.assembling()) Aim(true);
  if (!receiver_.assembling()) return false;
  // A new transfer: its pass ends with its last frame.
  if (receiver_.assembling_transfer() != pass_transfer_ ||
      receiver_.assembling_version() != pass_version_) {
    pass_transfer_ = receiver_.assembling_transfer();
    pass_version_ = receiver_.assembling_version();
    pass_last_seq_ = receiver_.frame_count() - 1;
    pass_open_ = true;
  }
  // Frames of a transfer stopped coming: say which are missing. Soon after
  // the pass's last frame came (what is missing before it was lost), else
  // after the full quiet (the last frame itself may be lost, or late).
  const uint64_t quiet = now_ns - receiver_.last_frame_ns();
  const bool pass_done =
      pass_open_ && receiver_.received(pass_last_seq_) && quiet > params_.nack_after_tail_ns;
  if (pass_done ||
      (quiet > params_.nack_after_ns && now_ns - last_ack_ns_ > params_.nack_after_ns)) {
    SendAck(now_ns, /*every_missing=*/true);
    return true;
  }
  return false;
}

}  // namespace dsm
