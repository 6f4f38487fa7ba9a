// This host's areas, shipped to the hosts that replicate them.
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "coherence/line_copy.h"
#include "daemon/remote_sync.h"
#include "daemon/tunables.h"
#include "libdsm/clock.h"
#include "libdsm/publish_protocol.h"

namespace dsm {

namespace {

// Hands DataFrameWriter's frames to the transport, counting them; a frame's
// lines in one stretch go as a tail read in place where the transport can.
struct TransportSink {
  net::Transport* transport;
  net::Destination dest;
  RemoteCounters* stats;
  net::TailHold* tails;
  uint8_t* reserved = nullptr;
  uint8_t* Reserve(size_t) { return reserved = transport->Reserve(dest); }
  void Commit(size_t bytes) {
    transport->Commit(bytes);
    ++stats->data_frames_out;
    stats->data_bytes_out += bytes;
  }
  void CommitWithTail(size_t bytes, std::span<const uint8_t> tail) {
    transport->CommitWithTail(reserved, bytes, tail, tails);
    ++stats->data_frames_out;
    stats->data_bytes_out += bytes + tail.size();
  }
};

}  // namespace

void RemoteSync::OnSubscribe(const wire::Frame& f, uint16_t host, uint64_t now_ns) {
  const uint32_t index = f.header.area_index;
  if (index >= kMaxAreas) {
    Drop(wire::DropReason::kUnknownArea);
    return;
  }
  AreaControl& a = segment_->areas[index];
  const bool live = a.state.load() != static_cast<uint32_t>(AreaState::kFree) && !a.is_replica;
  if (!live || a.generation != f.header.area_generation) {
    spdlog::debug("host {} subscribes to area {} generation {}: not ours (state {}, generation {})",
                  host, index, f.header.area_generation, a.state.load(), a.generation);
    Drop(wire::DropReason::kUnknownArea);
    return;
  }
  auto it = exports_.find(index);
  if (f.header.flags & wire::kFlagUnsubscribe) {
    if (it != exports_.end()) it->second.sender->Unsubscribe(host);
    return;
  }
  if (it == exports_.end() || it->second.generation != a.generation) {
    ExportedArea e;
    e.index = index;
    e.generation = a.generation;
    const auto slot = directory_->ReserveDaemonSlot(index);
    if (!slot) {
      spdlog::warn("cannot export '{}': no free reader slot", a.name);
      return;
    }
    e.reader_slot = *slot;
    // Without multicast a frame reaches one host: one host per transfer.
    e.sender = std::make_unique<ReplicaSender>(a.size, cluster_.multicast);
    e.pending = std::make_unique<LineSet>(a.size);
    e.shadow_stale = std::make_unique<LineSet>(a.size);
    e.shadow_stale->AddAll();  // the shadow does not exist yet
    e.tails = transport_->NewTailHold();
    e.logs = std::make_unique<ExportLogReader>(
        &a, reinterpret_cast<std::atomic<uint64_t>*>(backing_ + a.export_offset));
    a.export_enabled.store(1);  // from now on the writer logs each version's lines
    exports_.erase(index);
    it = exports_.emplace(index, std::move(e)).first;
    spdlog::info("exporting '{}' to host {}", a.name, host);
  }
  if (!it->second.sender->subscribed(host)) it->second.sender->Subscribe(host);
  (void)now_ns;
}

void RemoteSync::ForgetHostSubscriptions(uint16_t host) {
  for (auto& [index, e] : exports_) e.sender->Unsubscribe(host);
}

bool RemoteSync::Collect(ExportedArea& e, uint64_t now_ns) {
  AreaControl& a = segment_->areas[e.index];
  const uint64_t latest = UnpackLatest(a.latest.load()).version;
  // After a yield or a release nothing holds the collected version: pin it
  // again, even if the writer has not published since, once a host needs it.
  const bool repin = e.source_lost && e.sender->AnyDue(now_ns, CollectHoldNs(e));
  if (e.collected_once && latest <= e.sender->version() && !repin) return false;
  if (TailsInUse(e)) return false;  // the pin (and the shadow) stay as they are
  if (!e.collected_once) e.pending->AddAll();  // the first copy: everything
  // Take the lines the writer logged, and pin the newest version. If the
  // writer published again in between, the pin is newer than what was taken:
  // take again, so the lines we ship are exactly those changed up to the
  // pinned version; on the last try add the writer's current log too (a
  // superset is still exact, just larger). Until the new pin holds, the
  // previous version's buffer stays pinned beside it (`held`): frames of that
  // version may still be read from it.
  const uint32_t held = e.pinned >= 0 ? static_cast<uint32_t>(e.pinned) : kNoBuffer;
  constexpr int kAttempts = 4;
  LatestVersion pinned{};
  for (int attempt = 0;; ++attempt) {
    // The writer is still in a publish: what was taken waits in `pending`.
    if (!e.logs->Take(e.pending.get(), kExportWaitNs)) return false;
    if (!PinLatest(a, e.reader_slot, held, &pinned)) return false;
    if (pinned.version <= e.logs->taken_version() || !e.collected_once) break;
    if (attempt + 1 == kAttempts) {
      e.logs->AddCurrent(e.pending.get());
      break;
    }
    SetPin(a, e.reader_slot, held);
  }
  // The new version replaces the old as what frames are read from: no copy.
  SetPin(a, e.reader_slot, pinned.buffer);
  // A writer that found both pinned while we switched retries and asks again
  // if it still finds none free; an old request must not take the new pin.
  a.spare_wanted.store(0);
  e.pinned = static_cast<int>(pinned.buffer);
  e.pinned_version = pinned.version;
  // (Until a first copy creates the shadow, it lacks every line already.)
  if (!e.shadow.empty()) e.shadow_stale->Merge(*e.pending);
  e.sender->Collected(pinned.version, *e.pending);
  e.pending->Clear();
  e.collected_once = true;
  ++stats_.versions_collected;
  return true;
}

void RemoteSync::ReleasePins() {
  for (auto& [index, e] : exports_) {
    if (e.pinned >= 0 && ExportLive(e)) SetPin(segment_->areas[e.index], e.reader_slot, kNoBuffer);
    e.pinned = -1;
  }
}

const uint8_t* RemoteSync::FrameSource(const ExportedArea& e) const {
  if (e.pinned < 0) return e.shadow.data();
  return backing_ + segment_->areas[e.index].buffer_offset[e.pinned];
}

bool RemoteSync::TailsInUse(ExportedArea& e) {
  if (e.tails == nullptr || e.tails->frames_in_use() == 0) return false;
  transport_->Flush();
  return e.tails->frames_in_use() != 0;
}

void RemoteSync::DropTailsOfFreedExports() {
  // The freed area's pages went back to the host (or to another area):
  // a queued frame would send whatever they hold now.
  for (auto& [index, e] : exports_) {
    if (e.tails == nullptr || e.tails->frames_in_use() == 0 || ExportLive(e)) continue;
    const size_t n = transport_->DropTails(e.tails.get());
    spdlog::debug("area {} was freed: dropped {} queued frames that read its lines", e.index, n);
  }
}

bool RemoteSync::ExportLive(const ExportedArea& e) const {
  const AreaControl& a = segment_->areas[e.index];
  const auto state = static_cast<AreaState>(a.state.load());
  return a.generation == e.generation && (state == AreaState::kLive || state == AreaState::kSealed);
}

bool RemoteSync::WriterWantsPinned(const ExportedArea& e) const {
  if (e.pinned < 0) return false;
  const AreaControl& a = segment_->areas[e.index];
  // Our pin keeps the writer out only if it is not on the latest buffer (the
  // writer never publishes into that one anyway).
  return a.spare_wanted.load() != 0 &&
         UnpackLatest(a.latest.load()).buffer != static_cast<uint32_t>(e.pinned);
}

void RemoteSync::YieldPin(ExportedArea& e, uint64_t now_ns) {
  // Frames of it are still to go, or receivers lost frames lately and may ask
  // for them: keep the version in the shadow. (Without resends, a lossy
  // network never completes a large transfer: each retry is the union of more
  // versions, so more frames, so more likely to lose one.)
  if (e.in_send || e.loss.Recent(now_ns)) {
    Unpin(e);
    return;
  }
  // Every frame is out and only acknowledgements are awaited on a network that
  // has not lost frames lately. Give the buffer back without a copy: should a
  // receiver miss frames after all, it gets what it lacks with the next
  // version, as soon as it says so (OnAck -> ReplicaSender::OnLostTransfer).
  DropPin(e);
  ++stats_.pins_yielded;
}

void RemoteSync::DropPin(ExportedArea& e) {
  SetPin(segment_->areas[e.index], e.reader_slot, kNoBuffer);
  e.pinned = -1;
  e.sent.clear();
  e.source_lost = true;  // nothing holds the collected version: collect anew
}

void RemoteSync::Unpin(ExportedArea& e) {
  if (e.pinned < 0) return;
  AreaControl& a = segment_->areas[e.index];
  if (e.shadow.empty()) e.shadow.assign(a.mapped_size, 0);
  const uint8_t* buffer = FrameSource(e);
  e.shadow_stale->ForEachPage([&](size_t page, uint64_t mask) {
    CopyPageLines(page, mask, buffer, e.shadow.data());
  });
  StoreFence();
  e.shadow_stale->Clear();
  SetPin(a, e.reader_slot, kNoBuffer);
  e.pinned = -1;
  ++stats_.versions_shadowed;
}

bool RemoteSync::ContinueSend(ExportedArea& e, uint64_t now_ns) {
  // The device has not taken what we gave it last turn (a ring full until the
  // peer drains it): wait for it rather than queue more. Still work: the
  // loop keeps turning (and flushing) without sleeping.
  if (transport_->tx_backlog() >= kSendBurstFrames) return true;
  wire::Header h = MakeHeader(wire::FrameType::kData);
  h.area_index = e.index;
  h.area_generation = e.generation;
  h.version = e.sending.version;
  h.base_version = e.sending.base;
  h.flags = e.sending.full ? wire::kFlagFull : 0;
  h.transfer_id = e.sending.transfer_id;
  const bool group = cluster_.multicast && e.sending.hosts.size() > 1;
  h.dest_host = group ? wire::kAllHosts : e.sending.hosts.front();
  const net::Destination dest =
      group ? net::Destination::Group(kClusterGroup) : net::Destination::Host(e.sending.hosts.front());
  wire::DataFrameWriter writer(transport_->max_payload_bytes(), h);
  TransportSink sink{transport_.get(), dest, &stats_, FrameTails(e)};
  const uint32_t todo = std::min(kSendBurstFrames, e.frame_count - e.next_seq);
  const uint32_t sent = writer.WritePlanned(e.plan, FrameSource(e), e.next_seq, todo, sink);
  e.next_seq += sent;
  if (e.next_seq >= e.frame_count) {
    e.in_send = false;
    e.rto_ns = kRetransmitTimeoutNs + kRetransmitPerSendTime * (now_ns - e.send_started_ns);
    e.sender->Sent(e.sending, now_ns);
    stats_.changed_bytes_out += e.sending.lines->CountLines() * kLineBytes;
    ++stats_.transfers_sent;
    e.loss.OnTransferSent();
    const uint32_t id = e.sending.transfer_id;
    e.sent[id] = {std::move(e.sending), std::move(e.plan)};
  }
  return sent > 0;
}

bool RemoteSync::ExportTurn(ExportedArea& e, uint64_t now_ns) {
  if (!ExportLive(e)) {
    e.sender = std::make_unique<ReplicaSender>(0);  // freed: nobody to send to any more
    e.in_send = false;
    e.sent.clear();
    e.pinned = -1;  // the slot's pins went with the area
    e.source_lost = false;
    return false;
  }
  // For a writer freeing the area: how far every subscribed host has come.
  segment_->areas[e.index].remote_acked_version.store(e.sender->MinAcked(),
                                                      std::memory_order_relaxed);
  bool worked = false;
  // The writer's publish found no buffer because of our pin: let it go at once.
  AreaControl& a = segment_->areas[e.index];
  // (Not while the device still reads frames from it: the request stays.)
  if (a.spare_wanted.load() != 0 && !TailsInUse(e) && a.spare_wanted.exchange(0) != 0 &&
      e.pinned >= 0 && UnpackLatest(a.latest.load()).buffer != static_cast<uint32_t>(e.pinned)) {
    YieldPin(e, now_ns);
    worked = true;
  }
  if (e.in_send && std::none_of(e.sending.hosts.begin(), e.sending.hosts.end(),
                                [&](uint16_t h) { return e.sender->up(h); })) {
    // Every host of the transfer went down: stop (it was not recorded as sent,
    // so each gets all of it again, as part of its union, once back).
    e.in_send = false;
  }
  if (e.sender->reachable() == 0 && e.pinned >= 0 && !TailsInUse(e)) {
    // Nobody to ship to (no subscriber, or every one down): hold nothing (a
    // new subscriber, or one back up, has its transfer collected anew).
    e.in_send = false;
    DropPin(e);
  }
  if (e.pinned >= 0 && !e.in_send && e.sender->reachable() > 0 &&
      e.sender->MinAcked() >= e.pinned_version && !TailsInUse(e)) {
    // Every host holds the version: no frame of it will be read again. Let the
    // writer have its buffer (to publish into, or to catch up ahead of its
    // next publish) without waiting for our next collect.
    DropPin(e);
  }
  if (e.sender->reachable() > 0 && !e.in_send) {
    // A silent host delays the next version at most the retransmission timeout.
    const uint64_t rto = CollectHoldNs(e);
    // After a yield, collect anew as soon as a host needs a transfer; not
    // before the others answered, or they would be split over two transfers.
    const bool may_collect = !e.sender->AwaitingAcks(now_ns, rto) ||
                             (e.source_lost && e.sender->AnyDue(now_ns, rto));
    if (may_collect && Collect(e, now_ns)) {
      e.sent.clear();
      e.source_lost = false;
      // Receivers lost frames lately: resends are likely, and the writer will
      // want the buffer before they are done. Copy the version aside now, as
      // it is collected, rather than while the writer waits for the buffer.
      if (e.loss.Recent(now_ns)) Unpin(e);
      worked = true;
    }
    if (!e.source_lost && e.sender->NextTransfer(now_ns, rto, &e.sending)) {
      e.send_started_ns = now_ns;
      wire::DataFrameWriter writer(transport_->max_payload_bytes(), wire::Header{});
      e.plan = writer.MakePlan(*e.sending.lines);
      e.frame_count = e.plan.frames();
      e.next_seq = 0;
      e.in_send = e.frame_count > 0;
      if (!e.in_send) e.sender->Sent(e.sending, now_ns);
    }
  }
  if (e.sender->reachable() > 0 && e.in_send) worked |= ContinueSend(e, now_ns);
  return worked;
}

bool RemoteSync::ExportDue(uint64_t now_ns) const {
  for (const auto& [index, e] : exports_) {
    if (WriterWantsPinned(e)) return true;
    if (e.sender->reachable() == 0) continue;
    if (e.in_send || (e.source_lost && e.sender->AnyDue(now_ns, CollectHoldNs(e)))) return true;
    const uint64_t latest = UnpackLatest(segment_->areas[index].latest.load()).version;
    if (latest > e.sender->version() && !e.sender->AwaitingAcks(now_ns, CollectHoldNs(e))) return true;
  }
  return false;
}

void RemoteSync::OnAck(const wire::Frame& f, uint16_t host, uint64_t now_ns) {
  ++stats_.acks_in;
  auto it = exports_.find(f.header.area_index);
  if (it == exports_.end() || it->second.generation != f.header.area_generation) {
    Drop(wire::DropReason::kUnknownArea);
    return;
  }
  ExportedArea& e = it->second;
  if (!ExportLive(e)) return;  // freed: its buffers are gone
  if (f.header.flags & wire::kFlagFull) {
    e.sender->OnAckNothing(host);  // "I hold nothing yet": not an ack of version 0
  } else {
    e.sender->OnAck(host, f.header.version, now_ns);
  }
  // Frames a receiver misses of a transfer of the shadow's current version.
  const size_t ranges = f.body.size() / sizeof(wire::SeqRange);
  if (ranges > 0) e.loss.OnLoss(now_ns);
  auto sent = e.sent.find(f.header.transfer_id);
  if (ranges == 0) return;
  if (sent == e.sent.end() || f.header.base_version != sent->second.first.version) {
    // Its version is no longer here to resend from: what it lacks comes with
    // the next version now, not after the retransmission timeout.
    e.sender->OnLostTransfer(host, f.header.transfer_id);
    return;
  }
  const Transfer& t = sent->second.first;
  const wire::DataFrameWriter::Plan& plan = sent->second.second;
  wire::Header h = MakeHeader(wire::FrameType::kData);
  h.area_index = e.index;
  h.area_generation = e.generation;
  h.version = t.version;
  h.base_version = t.base;
  h.flags = t.full ? wire::kFlagFull : 0;
  h.transfer_id = t.transfer_id;
  h.dest_host = host;
  wire::DataFrameWriter writer(transport_->max_payload_bytes(), h);
  TransportSink sink{transport_.get(), net::Destination::Host(host), &stats_, FrameTails(e)};
  for (size_t i = 0; i < ranges; ++i) {
    wire::SeqRange r;
    std::memcpy(&r, f.body.data() + i * sizeof(r), sizeof(r));
    stats_.retransmitted_frames +=
        writer.WritePlanned(plan, FrameSource(e), r.first, r.count, sink);
  }
}

}  // namespace dsm
