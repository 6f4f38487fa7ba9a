// Other hosts' areas, replicated here and published to local readers.
#include <spdlog/spdlog.h>

#include "daemon/remote_sync.h"
#include "daemon/tunables.h"
#include "dsm/dsm.h"

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

void RemoteSync::RetireReplica(size_t i, bool freed, const char* why) {
  const Replica& r = *replicas_[i];
  spdlog::info("replica '{}' of host {} retired: {} (here {}, origin {}.{})", r.name, r.origin_host,
               why, r.local_index, r.origin_index, r.origin_generation);
  directory_->RetireReplica(r.local_index, freed);
  replicas_.erase(replicas_.begin() + static_cast<std::ptrdiff_t>(i));
}

std::string RemoteSync::RequestReplica(const std::string& name, uint64_t now_ns, int* status) {
  *status = DSM_ERR_NOT_FOUND;
  for (auto& [host, entries] : remote_dir_) {
    auto it = entries.find(name);
    if (it == entries.end() || !membership_->up(host)) continue;
    const wire::DirectoryEntry& d = it->second.entry;
    Replica* r = FindReplica(host, d.area_index, d.area_generation);
    if (!r) {
      std::string why;
      const auto index = directory_->CreateReplica(d, host, now_ns, &why);
      if (!index) {
        *status = DSM_ERR_NO_SPACE;
        return "cannot replicate '" + name + "' of host " + std::to_string(host) + " here: " + why;
      }
      auto fresh = std::make_unique<Replica>();
      fresh->local_index = *index;
      fresh->local_generation = segment_->areas[*index].generation;
      fresh->origin_host = host;
      fresh->origin_index = d.area_index;
      fresh->origin_generation = d.area_generation;
      fresh->name = name;
      AreaControl& a = segment_->areas[*index];
      const Replica* self = fresh.get();
      fresh->host = std::make_unique<ShmImportHost>(
          directory_, *index, &a, backing_, [this, self](const AckReport& ack) { SendAck(*self, ack); });
      fresh->area = std::make_unique<AreaImport>(a.size, a.buffer_count, params_, fresh->host.get(),
                                                 &import_counters_);
      fresh->marks = timeline_.ForArea(host, d.area_index, d.area_generation);
      fresh->area->set_stage_marks(fresh->marks.get());
      r = fresh.get();
      replicas_.push_back(std::move(fresh));
      spdlog::info("replicating '{}' from host {} (here {}, origin {}.{})", name, host, *index,
                   d.area_index, d.area_generation);
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
  const wire::DropReason drop = r->area->OnData(f, now_ns);
  if (drop != wire::DropReason::kNone) Drop(drop);
}

void RemoteSync::SendAck(const Replica& r, const AckReport& ack) {
  SendSmall(net::Destination::Host(r.origin_host), wire::FrameType::kAck, r.origin_index,
            r.origin_generation, ack.complete_version, ack.assembling_version,
            ack.holds_nothing ? wire::kFlagFull : 0, ack.transfer_id,
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(ack.missing.data()),
                                     ack.missing.size_bytes()));
}

uint64_t RemoteSync::SpareAwaitSleepNs(uint64_t now_ns) const {
  uint64_t sleep_ns = 0;
  for (const auto& r : replicas_) {
    if (!r->area->AwaitsSpare(now_ns)) continue;
    const uint64_t waited = std::max(kSpareAwaitPollNs, now_ns - r->area->published_ns());
    sleep_ns = sleep_ns == 0 ? waited : std::min(sleep_ns, waited);
  }
  return sleep_ns;
}

bool RemoteSync::ReplicaAwaitsPromptTimer() const {
  for (const auto& r : replicas_) {
    if (r->area->AwaitsPromptTimer()) return true;
  }
  return false;
}

}  // namespace dsm
