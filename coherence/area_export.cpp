#include "coherence/area_export.h"

#include <algorithm>
#include <bit>

#include "coherence/line_copy.h"

namespace dsm {

namespace {

// Hands DataFrameWriter's frames to the device, counting them; a frame's
// lines in one stretch go as a tail read in place when they come from the
// pinned buffer.
struct Sink {
  ExportFrameOut* out;
  uint16_t dest;
  ExportCounters* counters;
  bool in_place;
  bool from_stage = false;
  bool urgent = false;
  uint8_t* reserved = nullptr;
  uint8_t* Reserve(size_t) { return reserved = out->Reserve(dest, urgent); }
  void Commit(size_t bytes) {
    out->Commit(bytes);
    ++counters->data_frames_out;
    counters->data_bytes_out += bytes;
  }
  void CommitWithTail(size_t bytes, std::span<const uint8_t> tail) {
    out->CommitWithTail(reserved, bytes, tail, in_place);
    ++counters->data_frames_out;
    counters->data_bytes_out += bytes + tail.size();
    counters->frames_from_stage += from_stage ? 1 : 0;
  }
};

}  // namespace

AreaExport::AreaExport(size_t area_bytes, size_t mapped_bytes, bool shared_transfers,
                       const wire::Header& header, const SyncParams& params, ExportHost* host,
                       ExportFrameOut* out, ExportCounters* counters)
    : area_bytes_(area_bytes),
      mapped_bytes_(mapped_bytes),
      header_(header),
      params_(params),
      host_(host),
      out_(out),
      counters_(counters),
      sender_(area_bytes, shared_transfers),
      loss_(params.loss_memory_ns, params.loss_memory_transfers),
      pending_(area_bytes),
      selected_(area_bytes),
      shadow_stale_(area_bytes) {
  shadow_stale_.AddAll();  // the shadow does not exist yet
}

void AreaExport::SetManaged(const ManagedExport& managed, uint64_t now_ns) {
  managed_ = std::make_unique<ManagedSelection>(area_bytes_, managed.selection);
  budget_ = std::make_unique<ByteBudget>(managed.bytes_per_second, managed.burst_bytes, now_ns);
}

void AreaExport::Subscribe(uint16_t host) {
  if (!freed_ && !sender_.subscribed(host)) sender_.Subscribe(host);
}

void AreaExport::Unsubscribe(uint16_t host) {
  sender_.Unsubscribe(host);
  resends_.erase(host);
}

void AreaExport::AreaFreed() {
  freed_ = true;
  in_send_ = false;
  ForgetSent();
  resends_.clear();
  pinned_ = -1;  // the area's pins went with it
  source_lost_ = false;
  staged_ = false;  // and its stage
  stage_lines_.reset();
}

void AreaExport::ReleasePin() {
  if (!freed_) AbandonStage();
  if (pinned_ >= 0 && !freed_) host_->SetPin(-1);
  pinned_ = -1;
}

bool AreaExport::CollectStaged(uint64_t now_ns) {
  // A managed version's lines are chosen against the whole area's bytes.
  if (!collected_once_ || staged_ || managed_) return false;
  StagedVersion s;
  if (!host_->PostedStage(&s) || s.version != sender_.version() + 1 ||
      host_->LatestVersion() != sender_.version()) {
    return false;
  }
  if (host_->TailsInUse()) return false;  // the pin stays as it is
  // Every change up to the collected version must be collected already: the
  // staged lines are then exactly what changed since.
  uint64_t taken = 0;
  if (!host_->TakeChanges(&pending_, &taken) || !pending_.Empty()) return false;
  const uint64_t begin_ns = marks_ ? marks_->NowNs() : 0;
  host_->ClaimStage();
  // The claimed version's buffer replaces the pin once written; until then
  // nothing of the collected version is in a buffer.
  if (pinned_ >= 0) host_->SetPin(-1);
  pinned_ = -1;
  stage_ = s;
  staged_ = true;
  stage_written_ = false;
  // Its lines become the sender's collected set as they are (no copy).
  std::shared_ptr<LineSet> lines = sender_.NewSet();
  lines->AddRunsInOrder(s.runs);
  stage_lines_ = lines;
  stage_plan_ = wire::DataFrameWriter::Plan{};
  if (!shadow_.empty()) shadow_stale_.Merge(*lines);
  sender_.Collected(s.version, std::move(lines));
  ++counters_->versions_collected;
  ++counters_->versions_from_stage;
  if (marks_) {
    marks_->Mark(Stage::kCollectBegin, s.version, wire::kAllHosts, begin_ns);
    marks_->Mark(Stage::kCollected, s.version, wire::kAllHosts, marks_->NowNs());
  }
  (void)now_ns;
  return true;
}

void AreaExport::FollowStage(uint64_t now_ns) {
  if (!staged_) return;
  if (!stage_written_) {
    int buffer = -1;
    if (!host_->ClaimedStageWritten(&buffer)) return;
    pinned_ = buffer;
    pinned_version_ = stage_.version;
    stage_written_ = true;
  }
  // Kept while frames of it are being sent or due (the other hosts' copies
  // of the same lines), unless the writer waits for it.
  const bool wanted = host_->StageWanted();
  if (!wanted && ((in_send_ && sending_from_stage_) || sender_.AnyDue(now_ns, CollectHoldNs()))) {
    return;
  }
  if (host_->TailsInUse()) return;  // frames still read their lines there
  host_->ReleaseStage();
  staged_ = false;
  sending_from_stage_ = false;
  stage_lines_.reset();
}

void AreaExport::AbandonStage() {
  if (!staged_) return;
  host_->ReleaseStage();
  staged_ = false;
  sending_from_stage_ = false;
  stage_lines_.reset();
  if (!stage_written_) {
    // Its frames cannot be read anywhere now: collect anew once it is written.
    in_send_ = false;
    ForgetSent();
    resends_.clear();
    source_lost_ = true;
  }
}

bool AreaExport::FromStage(const Transfer& t) const {
  // (The cheap tests first: SameLines walks every page of both.)
  if (!staged_ || t.full || t.version != stage_.version || t.base + 1 != t.version) return false;
  return sender_.CarriesCollectedChanges(t) || t.lines->SameLines(*stage_lines_);
}

bool AreaExport::Collect(uint64_t now_ns) {
  const uint64_t latest = host_->LatestVersion();
  // After a yield or a release nothing holds the collected version: pin it
  // again, even if the writer has not published since, once a host needs it.
  const bool repin = source_lost_ && sender_.AnyDue(now_ns, CollectHoldNs());
  if (collected_once_ && latest <= sender_.version() && !repin) return false;
  if (host_->TailsInUse()) return false;  // the pin (and the shadow) stay as they are
  const uint64_t begin_ns = marks_ ? marks_->NowNs() : 0;
  if (!collected_once_) pending_.AddAll();  // the first copy: everything
  // Take the lines the writer changed, and pin the newest version. If the
  // writer published again in between, the pin is newer than what was taken:
  // take again, so the lines we ship are exactly those changed up to the
  // pinned version; on the last try add the changes not taken yet (a
  // superset is still exact, just larger). Until the new pin holds, the
  // previous version's buffer stays pinned beside it (`held`): frames of that
  // version may still be read from it.
  const int held = pinned_;
  constexpr int kAttempts = 4;
  int buffer = -1;
  uint64_t version = 0;
  for (int attempt = 0;; ++attempt) {
    uint64_t taken = 0;
    // The writer is still in a publish: what was taken waits in `pending_`.
    if (!host_->TakeChanges(&pending_, &taken)) return false;
    if (!host_->PinLatest(held, &buffer, &version)) return false;
    if (version <= taken || !collected_once_) break;
    if (attempt + 1 == kAttempts) {
      host_->AddUntakenChanges(&pending_);
      break;
    }
    host_->SetPin(held);
  }
  // The new version replaces the old as what frames are read from: no copy.
  host_->SetPin(buffer);
  // A writer that found both pinned while we switched retries and asks again
  // if it still finds none free; an old request must not take the new pin.
  host_->ClearBufferRequest();
  pinned_ = buffer;
  pinned_version_ = version;
  // A managed version carries the lines chosen; the shadow needs only those:
  // replicas are sent a waiting line's bytes as of when it was chosen (or
  // newer, from the pinned buffer), both within the lag bound. A dense update
  // then copies a budget's worth of lines when the pin goes, not the area.
  const LineSet& lines = managed_ ? SelectManaged(version, now_ns) : pending_;
  // (Until a first copy creates the shadow, it lacks every line already.)
  if (!shadow_.empty()) shadow_stale_.Merge(lines);
  sender_.Collected(version, lines);
  pending_.Clear();
  collected_once_ = true;
  ++counters_->versions_collected;
  if (marks_) {
    marks_->Mark(Stage::kCollectBegin, version, wire::kAllHosts, begin_ns);
    marks_->Mark(Stage::kCollected, version, wire::kAllHosts, marks_->NowNs());
  }
  return true;
}

const LineSet& AreaExport::SelectManaged(uint64_t version, uint64_t now_ns) {
  const uint8_t* current = host_->Buffer(pinned_);
  if (!collected_once_) {
    managed_->Reset(current);  // every host gets the whole area first
    managed_collects_ = 1;
    return pending_;
  }
  selected_.Clear();
  // A repin of the collected version carries nothing new. Lag counts the
  // versions collected: those are the ones replicas see.
  if (version > sender_.version()) {
    ++managed_collects_;
    budget_->Refill(now_ns);
    // At least a line's worth, so that a waiting line goes with every version
    // (a debt the budget pays back), and a version that carries no line at
    // all (nothing waits) still has one to frame: line 0, as readers have it.
    const size_t budget = std::max<size_t>(budget_->available(), kLineBytes);
    const ManagedChoice c =
        managed_->Select(managed_collects_, pending_, current, budget, &selected_);
    budget_->Spend(c.lines * kLineBytes);
    if (selected_.Empty()) selected_.AddLines(0, 1);
    counters_->managed_due_lines += c.due_lines;
    counters_->managed_over_budget_bytes += c.over_budget;
    counters_->managed_lines_deferred += c.residual;
  }
  host_->ManagedResidual(version, managed_->residual_lines(),
                         managed_->OldestLag(managed_collects_));
  return selected_;
}

bool AreaExport::FramesInPlace() {
  // While the writer waits for the pinned buffer, new frames copy their lines:
  // the device's frames that read them in place then drain, and the pin can
  // go (Turn). Framed in place, a steady stream of sends or resends would
  // keep the device reading the buffer, and the writer waiting, indefinitely.
  return pinned_ >= 0 && !host_->WriterWantsBuffer(pinned_);
}

const uint8_t* AreaExport::FrameSource() {
  return pinned_ < 0 ? shadow_.data() : host_->Buffer(pinned_);
}

void AreaExport::YieldPin(uint64_t now_ns) {
  // Frames of it are still to go, or receivers lost frames lately and may ask
  // for them: keep the version in the shadow. (Without resends, a lossy
  // network never completes a large transfer: each retry is the union of more
  // versions, so more frames, so more likely to lose one.)
  if (in_send_ || loss_.Recent(now_ns)) {
    Unpin();
    return;
  }
  // Every frame is out and only acknowledgements are awaited on a network that
  // has not lost frames lately. Give the buffer back without a copy: should a
  // receiver miss frames after all, it gets what it lacks with the next
  // version, as soon as it says so (OnAck -> ReplicaSender::OnLostTransfer).
  DropPin();
  ++counters_->pins_yielded;
}

void AreaExport::DropPin() {
  host_->SetPin(-1);
  pinned_ = -1;
  ForgetSent();
  source_lost_ = true;  // nothing holds the collected version: collect anew
}

void AreaExport::Unpin() {
  if (pinned_ < 0) return;
  if (shadow_.empty()) shadow_.assign(mapped_bytes_, 0);
  const uint8_t* buffer = host_->Buffer(pinned_);
  shadow_stale_.ForEachPage([&](size_t page, uint64_t mask) {
    CopyPageLines(page, mask, buffer, shadow_.data());
  });
  StoreFence();
  shadow_stale_.Clear();
  host_->SetPin(-1);
  pinned_ = -1;
  ++counters_->versions_shadowed;
}

void AreaExport::ForgetSent() {
  sent_.clear();  // their line sets go back to the sender's pool
}

wire::Header AreaExport::DataHeader(const Transfer& t, uint16_t dest) const {
  wire::Header h = header_;
  h.type = static_cast<uint8_t>(wire::FrameType::kData);
  h.dest_host = dest;
  h.version = t.version;
  h.base_version = t.base;
  h.flags = t.full ? wire::kFlagFull : 0;
  h.transfer_id = t.transfer_id;
  return h;
}

void AreaExport::MarkSending(Stage stage) {
  if (!marks_) return;
  const uint16_t peer = sending_.hosts.size() > 1 ? wire::kAllHosts : sending_.hosts.front();
  marks_->Mark(stage, sending_.version, peer, marks_->NowNs());
}

bool AreaExport::ContinueSend(uint64_t now_ns) {
  // The device has not taken what it was given last turn (a ring full until
  // the peer drains it): wait for it rather than queue more. Still work: the
  // loop keeps turning (and flushing) without sleeping. A transfer of a few
  // frames (a step count others wait for) does not wait behind bulk frames:
  // it goes ahead of them.
  const bool urgent = frame_count_ <= params_.urgent_max_frames;
  if (!urgent && out_->backlog() >= params_.send_burst_frames) return true;
  const bool group = sending_.hosts.size() > 1;
  const uint16_t dest = group ? wire::kAllHosts : sending_.hosts.front();
  const bool from_stage = sending_from_stage_ && staged_;
  if (!from_stage && AwaitingStageWrite()) return false;  // its lines are in no buffer yet
  const wire::DataFrameWriter writer(out_->max_frame_bytes(), DataHeader(sending_, dest),
                                     out_->seal());
  const uint32_t todo = std::min(params_.send_burst_frames, frame_count_ - next_seq_);
  uint32_t sent;
  if (from_stage) {
    // The stage stays until these frames are out (TailsInUse).
    Sink sink{out_, dest, counters_, /*in_place=*/true, /*from_stage=*/true, urgent};
    sent = writer.WriteCompact(plan_, stage_.bytes, next_seq_, todo, sink);
  } else {
    Sink sink{out_, dest, counters_, FramesInPlace(), /*from_stage=*/false, urgent};
    sent = writer.WritePlanned(plan_, FrameSource(), next_seq_, todo, sink);
  }
  next_seq_ += sent;
  if (next_seq_ >= frame_count_) {
    in_send_ = false;
    sending_from_stage_ = false;
    MarkSending(Stage::kFramed);
    rto_ns_ = params_.retransmit_timeout_ns +
              params_.retransmit_per_send_time * (now_ns - send_started_ns_);
    sender_.Sent(sending_, now_ns);
    counters_->changed_bytes_out +=
        uint64_t{plan_.lines_before.back()} * kLineBytes;  // the transfer's lines
    ++counters_->transfers_sent;
    loss_.OnTransferSent();
    const uint32_t id = sending_.transfer_id;
    sent_[id] = {std::move(sending_), std::move(plan_)};
  }
  return sent > 0;
}

bool AreaExport::Turn(uint64_t now_ns) {
  if (freed_) return false;
  bool worked = false;
  FollowStage(now_ns);
  // The writer's publish found no buffer because of our pin: let it go at
  // once (not while the device still reads frames from it: the request stays).
  if (host_->WriterWantsBuffer(pinned_) && !host_->TailsInUse() && host_->TakeBufferRequest()) {
    YieldPin(now_ns);
    worked = true;
  }
  if (in_send_ && std::none_of(sending_.hosts.begin(), sending_.hosts.end(),
                               [&](uint16_t h) { return sender_.up(h); })) {
    // Every host of the transfer went down: stop (it was not recorded as
    // sent, so each gets all of it again, as part of its union, once back).
    in_send_ = false;
  }
  if (sender_.reachable() == 0 && pinned_ >= 0 && !host_->TailsInUse()) {
    // Nobody to ship to (no subscriber, or every one down): hold nothing (a
    // new subscriber, or one back up, has its transfer collected anew).
    in_send_ = false;
    DropPin();
  }
  if (sender_.reachable() == 0 && staged_ && !host_->TailsInUse()) {
    AbandonStage();
    source_lost_ = true;
  }
  if (pinned_ >= 0 && !in_send_ && sender_.reachable() > 0 &&
      sender_.MinAcked() >= pinned_version_ && !host_->TailsInUse()) {
    // Every host holds the version: no frame of it will be read again. Let the
    // writer have its buffer (to publish into, or to catch up ahead of its
    // next publish) without waiting for our next collect.
    DropPin();
  }
  if (sender_.reachable() > 0 && !in_send_) {
    // A silent host delays the next version at most the retransmission timeout.
    const uint64_t hold = CollectHoldNs();
    // After a yield, collect anew as soon as a host needs a transfer; not
    // before the others answered, or they would be split over two transfers.
    const bool may_collect = !sender_.AwaitingAcks(now_ns, hold) ||
                             (source_lost_ && sender_.AnyDue(now_ns, hold));
    if (may_collect && !in_send_ && CollectStaged(now_ns)) {
      ForgetSent();
      source_lost_ = false;
      worked = true;
    } else if (may_collect && Collect(now_ns)) {
      ForgetSent();
      source_lost_ = false;
      // Receivers lost frames lately: resends are likely, and the writer will
      // want the buffer before they are done. Copy the version aside now, as
      // it is collected, rather than while the writer waits for the buffer.
      if (loss_.Recent(now_ns)) Unpin();
      worked = true;
    }
    if (!source_lost_ && sender_.NextTransfer(now_ns, hold, &sending_)) {
      // What its hosts asked for of earlier transfers is not sent any more:
      // frames of an older transfer arriving amid this one's would only
      // make a receiver switch back to it.
      for (uint16_t h : sending_.hosts) {
        auto r = resends_.find(h);
        if (r != resends_.end() && r->second.transfer_id != sending_.transfer_id) resends_.erase(r);
      }
      send_started_ns_ = now_ns;
      const wire::DataFrameWriter writer(out_->max_frame_bytes(), wire::Header{}, out_->seal());
      sending_from_stage_ = FromStage(sending_);
      if (sending_from_stage_) {
        if (stage_plan_.frames() == 0) stage_plan_ = writer.MakePlanOfRuns(stage_.runs);
        plan_ = stage_plan_;
      } else {
        plan_ = writer.MakePlan(*sending_.lines);
      }
      frame_count_ = plan_.frames();
      next_seq_ = 0;
      in_send_ = frame_count_ > 0;
      MarkSending(Stage::kPlanned);
      if (!in_send_) sender_.Sent(sending_, now_ns);
    }
  }
  // What receivers reported missing first: it completes versions they
  // assemble already.
  if (!resends_.empty()) worked |= ContinueResends(now_ns);
  if (sender_.reachable() > 0 && in_send_) worked |= ContinueSend(now_ns);
  return worked;
}

bool AreaExport::Due(uint64_t now_ns) {
  if (freed_) return false;
  if (host_->WriterWantsBuffer(pinned_)) return true;
  if (staged_) {
    // Written meanwhile (its pin to take), or wanted back by the writer.
    int buffer = -1;
    if (stage_written_ ? host_->StageWanted() : host_->ClaimedStageWritten(&buffer)) return true;
  }
  if (sender_.reachable() == 0) return false;
  if (!resends_.empty()) return true;
  if (in_send_ || (source_lost_ && sender_.AnyDue(now_ns, CollectHoldNs()))) return true;
  return host_->LatestVersion() > sender_.version() &&
         !sender_.AwaitingAcks(now_ns, CollectHoldNs());
}

void AreaExport::OnAck(uint16_t host, uint64_t complete_version, bool holds_nothing,
                       uint64_t assembling_version, uint32_t transfer_id,
                       std::span<const wire::SeqRange> missing, uint64_t now_ns) {
  if (freed_) return;  // its buffers are gone
  if (holds_nothing) {
    sender_.OnAckNothing(host);  // "I hold nothing yet": not an ack of version 0
  } else {
    sender_.OnAck(host, complete_version, now_ns);
  }
  if (missing.empty()) return;
  // Frames a receiver misses of a transfer of the collected version.
  loss_.OnLoss(now_ns);
  auto sent = sent_.find(transfer_id);
  if (sent == sent_.end() || assembling_version != sent->second.first.version) {
    // Its version is no longer here to resend from: what it lacks comes with
    // the next version now, not after the retransmission timeout.
    resends_.erase(host);
    sender_.OnLostTransfer(host, transfer_id);
    return;
  }
  // A newer transfer is on its way to the host (the report crossed it):
  // frames of this one would only make the host switch back to it.
  if (!sender_.InFlight(host, transfer_id)) return;
  // Queued, to go as the device takes them (Turn): a NACK may list a whole
  // version's frames, more than the device holds at once.
  const uint32_t frames = sent->second.second.frames();
  Resends& r = resends_[host];
  if (r.transfer_id != transfer_id || r.seqs.size() != (frames + 63) / 64) {
    r = Resends{};
    r.transfer_id = transfer_id;
    r.seqs.assign((frames + 63) / 64, 0);
    r.next = frames;
  }
  for (const wire::SeqRange& range : missing) {
    if (range.first >= frames) continue;
    const uint32_t end = range.first + std::min(range.count, frames - range.first);
    for (uint32_t seq = range.first; seq < end; ++seq) {
      uint64_t& word = r.seqs[seq / 64];
      const uint64_t bit = uint64_t{1} << (seq % 64);
      r.queued += (word & bit) ? 0 : 1;
      word |= bit;
    }
    r.next = std::min(r.next, range.first);
  }
  if (r.queued == 0) resends_.erase(host);
}

bool AreaExport::ContinueResends(uint64_t now_ns) {
  bool worked = false;
  for (auto it = resends_.begin(); it != resends_.end();) {
    const uint16_t host = it->first;
    Resends& r = it->second;
    auto sent = sent_.find(r.transfer_id);
    if (sent == sent_.end() || !sender_.subscribed(host) || !sender_.up(host)) {
      if (sent == sent_.end()) sender_.OnLostTransfer(host, r.transfer_id);
      it = resends_.erase(it);
      continue;
    }
    const size_t backlog = out_->backlog();
    if (backlog >= params_.send_burst_frames) return true;  // the device is full
    uint32_t budget = params_.send_burst_frames - static_cast<uint32_t>(backlog);
    const Transfer& t = sent->second.first;
    const bool from_stage = FromStage(t);
    if (!from_stage && AwaitingStageWrite()) return worked;  // in no buffer yet
    const wire::DataFrameWriter::Plan& plan = sent->second.second;
    const wire::DataFrameWriter writer(out_->max_frame_bytes(), DataHeader(t, host), out_->seal());
    Sink sink{out_, host, counters_, from_stage || FramesInPlace(), from_stage};
    const uint32_t frames = plan.frames();
    uint32_t resent = 0;
    bool device_refused = false;
    while (budget > 0 && r.queued > 0 && !device_refused) {
      // The next run of queued seqs from r.next, at most `budget` long.
      uint32_t first = r.next;
      while (first < frames) {
        const uint64_t word = r.seqs[first / 64] >> (first % 64);
        if (word != 0) {
          first += static_cast<uint32_t>(std::countr_zero(word));
          break;
        }
        first = (first / 64 + 1) * 64;
      }
      if (first >= frames) break;
      uint32_t end = first;
      while (end < frames && end - first < budget &&
             (r.seqs[end / 64] & (uint64_t{1} << (end % 64)))) {
        ++end;
      }
      const uint32_t n = from_stage
                             ? writer.WriteCompact(plan, stage_.bytes, first, end - first, sink)
                             : writer.WritePlanned(plan, FrameSource(), first, end - first, sink);
      for (uint32_t seq = first; seq < first + n; ++seq) {
        r.seqs[seq / 64] &= ~(uint64_t{1} << (seq % 64));
      }
      r.queued -= n;
      r.next = first + n;
      resent += n;
      budget -= n;
      device_refused = n < end - first;
    }
    counters_->retransmitted_frames += resent;
    if (resent > 0) {
      sender_.OnResent(host, r.transfer_id, now_ns);
      worked = true;
    }
    if (device_refused) return true;
    it = r.queued == 0 ? resends_.erase(it) : std::next(it);
  }
  return worked;
}

}  // namespace dsm
