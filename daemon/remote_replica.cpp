// Other hosts' areas, replicated here and published to local readers.
#include <spdlog/spdlog.h>

#include <cstring>

#include "daemon/remote_sync.h"
#include "daemon/tunables.h"
#include "libdsm/clock.h"
#include "libdsm/publish_protocol.h"

namespace dsm {

RemoteSync::Replica* RemoteSync::FindReplica(uint16_t host, uint32_t index, uint32_t generation) {
  for (auto& r : replicas_) {
    if (r->origin_host == host && r->origin_index == index && r->origin_generation == generation) {
      return r.get();
    }
  }
  return nullptr;
}

void RemoteSync::DropFreedReplicas() {
  auto freed = [&](const std::unique_ptr<Replica>& r) {
    const AreaControl& a = segment_->areas[r->local_index];
    return !a.is_replica || a.generation != r->local_generation ||
           a.state.load() == static_cast<uint32_t>(AreaState::kFree);
  };
  for (auto it = replicas_.begin(); it != replicas_.end();) {
    if (!freed(*it)) {
      ++it;
      continue;
    }
    const Replica& r = **it;
    spdlog::info("replica '{}' of host {} was freed here", r.name, r.origin_host);
    const bool again = std::any_of(replicas_.begin(), replicas_.end(), [&](const auto& o) {
      return o.get() != &r && !freed(o) && o->origin_host == r.origin_host &&
             o->origin_index == r.origin_index && o->origin_generation == r.origin_generation;
    });
    if (!again) {  // nobody here wants that area any more
      SendSmall(net::Destination::Host(r.origin_host), wire::FrameType::kSubscribe, r.origin_index,
                r.origin_generation, 0, 0, wire::kFlagUnsubscribe, 0, {});
    }
    it = replicas_.erase(it);
  }
}

std::string RemoteSync::RequestReplica(const std::string& name, uint64_t now_ns) {
  for (auto& [host, entries] : remote_dir_) {
    auto it = entries.find(name);
    if (it == entries.end() || !membership_->up(host)) continue;
    const wire::DirectoryEntry& d = it->second.entry;
    Replica* r = FindReplica(host, d.area_index, d.area_generation);
    if (!r) {
      std::string why;
      const auto index = directory_->CreateReplica(d, host, now_ns, &why);
      if (!index) return "cannot replicate '" + name + "' here: " + why;
      auto fresh = std::make_unique<Replica>();
      fresh->local_index = *index;
      fresh->local_generation = segment_->areas[*index].generation;
      fresh->origin_host = host;
      fresh->origin_index = d.area_index;
      fresh->origin_generation = d.area_generation;
      fresh->name = name;
      AreaControl& a = segment_->areas[*index];
      fresh->receiver = std::make_unique<ReplicaReceiver>(a.size, backing_ + a.writer_offset);
      fresh->publisher = std::make_unique<VersionPublisher>(a.size, a.buffer_count);
      r = fresh.get();
      AimReplica(*r, false);
      replicas_.push_back(std::move(fresh));
      spdlog::info("replicating '{}' from host {}", name, host);
    }
    if (now_ns - r->subscribed_ns > params_.retransmit_timeout_ns) {
      // Repeated until the first version arrives, in case a SUBSCRIBE is lost.
      SendSmall(net::Destination::Host(host), wire::FrameType::kSubscribe, r->origin_index,
                r->origin_generation, 0, 0, 0, 0, {});
      r->subscribed_ns = now_ns;
    }
    return "fetching '" + name + "' from host " + std::to_string(host);
  }
  return "";
}

void RemoteSync::OnData(const wire::Frame& f, uint16_t host, uint64_t now_ns) {
  Replica* r = FindReplica(host, f.header.area_index, f.header.area_generation);
  if (!r) {
    Drop(wire::DropReason::kUnknownArea);
    return;
  }
  // The first line of a version goes straight to a reader buffer if one is free
  // by now (local readers move off the previous version as soon as it is out).
  if (r->target < 0 && r->receiver->changed().Empty()) AimReplica(*r, false);
  const ReplicaReceiver::Result res = r->receiver->OnData(f, now_ns);
  if (res.drop != wire::DropReason::kNone) Drop(res.drop);
  if (res.completed) {
    ++stats_.versions_received;
    SendAck(*r, now_ns);  // first: the sender may move on while we copy locally
    PublishReplica(*r, now_ns);
  } else if (res.ack_now && now_ns - r->last_ack_ns >= params_.ack_min_gap_ns) {
    // Frames we cannot use (another host's transfer, an old version) each ask
    // for an ack; one per gap is enough to tell the sender where we are.
    SendAck(*r, now_ns);
  }
}

void RemoteSync::AimReplica(Replica& r, bool catch_up) {
  AreaControl& a = segment_->areas[r.local_index];
  const int buffer =
      PickTargetBuffer(a.buffer_count, UnpackLatest(a.latest.load()).buffer, PinnedBuffers(a));
  // A reader pins only the latest buffer (PinLatest re-checks `latest`), so a
  // buffer unpinned now stays unpinned until we make it the latest.
  uint8_t* dst = backing_ + (buffer >= 0 ? a.buffer_offset[buffer] : a.writer_offset);
  if (!r.receiver->SetTarget(dst)) return;
  r.target = buffer;
  // Nothing of the next version is in it yet: what it missed of the earlier
  // ones can be copied now rather than when that version completes.
  if (buffer >= 0 && catch_up && r.publisher->CatchUpWorthwhile(static_cast<uint32_t>(buffer))) {
    const uint8_t* latest = backing_ + a.buffer_offset[UnpackLatest(a.latest.load()).buffer];
    const size_t bytes = r.publisher->CatchUp(static_cast<uint32_t>(buffer), latest, dst);
    a.bytes_published.fetch_add(bytes, std::memory_order_relaxed);
    a.bytes_caught_up.fetch_add(bytes, std::memory_order_relaxed);
  }
}

void RemoteSync::PublishReplica(Replica& r, uint64_t now_ns) {
  AreaControl& a = segment_->areas[r.local_index];
  const LineSet& written = r.receiver->changed();
  const int target = r.target >= 0 ? r.target : ChoosePublishTarget(a);
  if (target < 0) return;  // local readers hold every spare buffer: retried next turn
  uint8_t* dst = backing_ + a.buffer_offset[target];
  size_t bytes = 0;
  if (r.target < 0) {  // staged: copy the new lines over
    written.ForEachPage([&](size_t page, uint64_t mask) {
      bytes += CopyPageLines(page, mask, backing_ + a.writer_offset, dst);
    });
  } else {
    bytes = written.CountLines() * kLineBytes;  // already in place
  }
  // What the target missed of earlier versions comes from the latest one.
  const uint8_t* latest = backing_ + a.buffer_offset[UnpackLatest(a.latest.load()).buffer];
  bytes += r.publisher->PublishInPlace(written, static_cast<uint32_t>(target), latest, dst);
  CompletePublish(a, static_cast<uint32_t>(target), r.receiver->complete_version(), now_ns, bytes);
  if (r.target >= 0) ++stats_.versions_received_in_place;
  r.receiver->Published();
  // Not aimed at a spare yet: right now local readers still hold the version
  // before, and with two buffers that is the only spare. The next frame, or
  // the next turn (ReplicaTurn), aims again.
  r.receiver->SetTarget(backing_ + a.writer_offset);
  r.target = -1;
  if (!r.named) r.named = directory_->NameReplica(r.local_index);
}

void RemoteSync::SendAck(Replica& r, uint64_t now_ns) {
  wire::SeqRange missing[wire::kMaxMissingRanges];
  const size_t n = r.receiver->MissingRanges(missing, wire::kMaxMissingRanges);
  SendSmall(net::Destination::Host(r.origin_host), wire::FrameType::kAck, r.origin_index,
            r.origin_generation, r.receiver->complete_version(), r.receiver->assembling_version(),
            r.receiver->has_base() ? 0 : wire::kFlagFull, r.receiver->assembling_transfer(),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(missing),
                                     n * sizeof(wire::SeqRange)));
  r.last_ack_ns = now_ns;
  ++stats_.acks_out;
}

bool RemoteSync::ReplicaTurn(Replica& r, uint64_t now_ns) {
  if (r.receiver->publish_pending()) {
    PublishReplica(r, now_ns);
    return !r.receiver->publish_pending();
  }
  // Received into the staging copy for want of a free buffer: look again.
  if (r.target < 0 && !r.receiver->assembling()) AimReplica(r, true);
  // Frames of a transfer stopped coming: say which are missing.
  if (r.receiver->assembling() && now_ns - r.receiver->last_frame_ns() > params_.nack_after_ns &&
      now_ns - r.last_ack_ns > params_.nack_after_ns) {
    SendAck(r, now_ns);
    return true;
  }
  return false;
}

void RemoteSync::HeardFrom(uint16_t host, uint64_t incarnation, uint64_t now_ns) {
  switch (membership_->Heard(host, incarnation, now_ns)) {
    case Membership::Event::kCameUp:
      OnHostUp(host);
      break;
    case Membership::Event::kRestarted:
      OnHostRestarted(host);
      break;
    case Membership::Event::kNone:
      break;
  }
}

void RemoteSync::OnHostUp(uint16_t host) {
  spdlog::info("host {} is up", host);
  for (auto& r : replicas_) {
    if (r->origin_host == host) directory_->SetReplicaWriterAlive(r->local_index, true);
  }
  // Same incarnation (it was only silent): what it missed goes now.
  for (auto& [index, e] : exports_) e.area->SetHostUp(host, true);
}

void RemoteSync::OnHostDown(uint16_t host) {
  spdlog::warn("host {} is down", host);
  for (auto& r : replicas_) {
    if (r->origin_host == host) directory_->SetReplicaWriterAlive(r->local_index, false);
  }
  // It stays subscribed, but is sent nothing and holds nothing back (the
  // writer's free, the shadow) until it is heard from again.
  for (auto& [index, e] : exports_) e.area->SetHostUp(host, false);
}

void RemoteSync::OnHostRestarted(uint16_t host) {
  spdlog::warn("host {} restarted", host);
  ForgetHostSubscriptions(host);
  // Its areas are gone with its processes: our replicas keep their last version.
  for (auto& r : replicas_) {
    if (r->origin_host == host) directory_->SetReplicaWriterAlive(r->local_index, false);
  }
  remote_dir_.erase(host);
}

}  // namespace dsm
