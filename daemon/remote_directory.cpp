// Heartbeats and directory listings: who is up, which areas each host has,
// and which replicas here lost their origin area for good.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "coherence/version_publisher.h"
#include "daemon/remote_sync.h"
#include "daemon/tunables.h"
#include "libdsm/contract/clock.h"
#include "libdsm/contract/region_limits.h"

namespace dsm {

void RemoteSync::SendHeartbeat(uint64_t now_ns) {
  wire::HeartbeatBody hb{};
  hb.sent_ns = now_ns;
  hb.region_used_bytes = segment_->header.backing_used_bytes.load();
  hb.region_bytes = segment_->header.backing_bytes;
  const auto body = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&hb), sizeof(hb));
  // Lazy: a peer reads it at its next look, well within kHostDownAfterNs,
  // rather than being woken for it.
  if (cluster_.multicast) {
    SendSmall(net::Destination::Group(kClusterGroup).Lazy(), wire::FrameType::kHeartbeat, 0, 0, 0,
              0, 0, 0, body);
  } else {
    for (uint16_t peer : membership_->peer_ids()) {
      SendSmall(net::Destination::Host(peer).Lazy(), wire::FrameType::kHeartbeat, 0, 0, 0, 0, 0, 0,
                body);
    }
  }
}

void RemoteSync::SendDirectory(uint64_t now_ns, bool lazy) {
  std::vector<wire::DirectoryEntry> entries;
  for (uint32_t i = 0; i < kMaxAreas; ++i) {
    const AreaControl& a = segment_->areas[i];
    // Sealed areas (writer gone) stay listed: their replicas elsewhere learn it.
    const auto state = static_cast<AreaState>(a.state.load());
    if ((state != AreaState::kLive && state != AreaState::kSealed) || a.is_replica) continue;
    if (!directory_->Named(i)) continue;
    wire::DirectoryEntry d{};
    std::memcpy(d.name, a.name, sizeof(d.name));
    d.area_index = i;
    d.area_generation = a.generation;
    d.addr = a.addr;
    d.size = a.size;
    d.mapped_size = a.mapped_size;
    d.sync_interval_us = static_cast<uint32_t>(a.sync_interval_ns / 1000);
    d.staleness_bound_ms = static_cast<uint32_t>(a.staleness_bound_ns / 1000000);
    d.state = a.state.load();
    d.reader_buffers = a.buffer_count;
    d.latest_version = UnpackLatest(a.latest.load()).version;
    const uint64_t confirmed = a.confirmed_ns.load();
    d.confirmed_age_ns = now_ns > confirmed ? now_ns - confirmed : 0;
    d.managed_budget_bytes_per_s = a.managed_budget_bytes_per_s;
    d.managed_max_line_age = a.managed_max_line_age;
    d.managed_element = a.managed_element;
    d.managed_residual_lines = a.managed_residual_lines.load(std::memory_order_relaxed);
    d.managed_residual_version = a.managed_residual_version.load(std::memory_order_acquire);
    d.managed_oldest_lag = a.managed_oldest_lag.load(std::memory_order_relaxed);
    entries.push_back(d);
  }
  const size_t per_frame =
      (transport_->max_payload_bytes() - seal_.header_bytes()) / sizeof(wire::DirectoryEntry);
  const size_t frames = entries.empty() ? 1 : (entries.size() + per_frame - 1) / per_frame;
  // One numbered round, sent at once: a receiver holding all of its frames
  // knows every area this host has (directory_rounds.h).
  wire::Header h = MakeHeader(wire::FrameType::kDirectory);
  h.version = ++directory_round_;
  h.frame_count = static_cast<uint32_t>(frames);
  for (size_t f = 0; f < frames; ++f) {
    const size_t first = f * per_frame;
    const size_t count = std::min(per_frame, entries.size() - std::min(first, entries.size()));
    const auto body = std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(entries.data() + first), count * sizeof(wire::DirectoryEntry));
    h.seq = static_cast<uint32_t>(f);
    if (cluster_.multicast) {
      net::Destination to = net::Destination::Group(kClusterGroup);
      SendFrame(lazy ? to.Lazy() : to, h, body);
    } else {
      for (uint16_t peer : membership_->peer_ids()) {
        net::Destination to = net::Destination::Host(peer);
        SendFrame(lazy ? to.Lazy() : to, h, body);
      }
    }
  }
}

void RemoteSync::OnHeartbeat(const wire::Frame& f, uint16_t host) {
  wire::HeartbeatBody hb;
  std::memcpy(&hb, f.body.data(), sizeof(hb));
  HostInfo& info = segment_->header.hosts[host];
  info.region_used_bytes = hb.region_used_bytes;
  info.region_bytes = hb.region_bytes;
}

void RemoteSync::OnDirectory(const wire::Frame& f, uint16_t host, uint64_t now_ns) {
  auto& entries = remote_dir_[host];
  const size_t n = f.body.size() / sizeof(wire::DirectoryEntry);
  std::vector<DirectoryRounds::AreaId> listed;
  for (size_t i = 0; i < n; ++i) {
    wire::DirectoryEntry d;
    std::memcpy(&d, f.body.data() + i * sizeof(d), sizeof(d));
    d.name[kMaxNameBytes - 1] = '\0';
    entries[d.name] = {d, now_ns};
    listed.push_back({uint32_t{d.area_index}, uint32_t{d.area_generation}});
    if (d.state == static_cast<uint32_t>(AreaState::kLive)) RetireReplicasNamedLike(d, host, now_ns);
    // A replica that holds the writer's latest version is as fresh as the writer says.
    if (Replica* r = FindReplica(host, d.area_index, d.area_generation)) {
      // A forged frame claiming a version far beyond what the writer's host
      // advertises would pin the replica there (every real version looking old).
      r->area->set_version_limit(d.latest_version + params_.version_slack);
      r->area->OnWriterLatest(d.latest_version, now_ns);
      SetWriterAlive(*r, d.state == static_cast<uint32_t>(AreaState::kLive), now_ns);
      AreaControl& a = segment_->areas[r->local_index];
      a.managed_residual_lines.store(d.managed_residual_lines, std::memory_order_relaxed);
      a.managed_oldest_lag.store(d.managed_oldest_lag, std::memory_order_relaxed);
      a.managed_residual_version.store(d.managed_residual_version, std::memory_order_release);
      if (r->host->named() && UnpackLatest(a.latest.load()).version >= d.latest_version) {
        a.confirmed_ns.store(now_ns > d.confirmed_age_ns ? now_ns - d.confirmed_age_ns : 0);
      }
    }
  }
  FollowNames(f, host);
  std::erase_if(entries, [&](const auto& kv) { return now_ns - kv.second.heard_ns > kDirectoryForgetNs; });
  if (auto whole = listings_.OnFrame(host, f.header.version, f.header.seq, f.header.frame_count, listed)) {
    OnWholeListing(host, *whole);
  }
}

void RemoteSync::FollowNames(const wire::Frame& f, uint16_t host) {
  // A host names one area per name: a replica here of another of its areas
  // under a name it now gives to a newer one is found by name no more (its
  // readers keep it), and the newer one's replica takes the name. Unnamed
  // first, so the name is free when the current replica asks for it.
  const size_t n = f.body.size() / sizeof(wire::DirectoryEntry);
  for (const bool current : {false, true}) {
    for (size_t i = 0; i < n; ++i) {
      wire::DirectoryEntry d;
      std::memcpy(&d, f.body.data() + i * sizeof(d), sizeof(d));
      d.name[kMaxNameBytes - 1] = '\0';
      for (auto& r : replicas_) {
        if (r->origin_host != host || r->name != d.name) continue;
        const bool same = r->origin_index == d.area_index && r->origin_generation == d.area_generation;
        if (same == current) r->host->SetCurrent(current);
      }
    }
  }
}

void RemoteSync::OnWholeListing(uint16_t host, const std::set<DirectoryRounds::AreaId>& areas) {
  // `areas`: listed by either of the host's last two whole rounds. Entries of
  // areas it no longer has go too: attach must not find them.
  std::erase_if(remote_dir_[host], [&](const auto& kv) {
    const wire::DirectoryEntry& e = kv.second.entry;
    return areas.count({uint32_t{e.area_index}, uint32_t{e.area_generation}}) == 0;
  });
  for (size_t i = replicas_.size(); i-- > 0;) {
    const Replica& r = *replicas_[i];
    if (r.origin_host != host || areas.count({r.origin_index, r.origin_generation}) != 0) continue;
    // Freed by its writer, unless the writer had died first (it was listed
    // sealed): then its name went to a new area.
    const bool freed =
        segment_->areas[r.local_index].state.load() == static_cast<uint32_t>(AreaState::kLive);
    RetireReplica(i, freed, freed ? "it was freed" : "its name went to a new area");
  }
}

void RemoteSync::SetWriterAlive(Replica& r, bool alive, uint64_t now_ns) {
  directory_->SetReplicaWriterAlive(r.local_index, alive);
  if (alive) {
    r.writer_gone_since_ns = 0;
  } else if (r.writer_gone_since_ns == 0) {
    r.writer_gone_since_ns = std::max<uint64_t>(now_ns, 1);
  }
}

void RemoteSync::RetireReplicasNamedLike(const wire::DirectoryEntry& entry, uint16_t host,
                                         uint64_t now_ns) {
  for (size_t i = replicas_.size(); i-- > 0;) {
    const Replica& r = *replicas_[i];
    if (r.name != entry.name) continue;
    if (r.origin_host == host && r.origin_index == entry.area_index &&
        r.origin_generation == entry.area_generation) {
      continue;  // the same area
    }
    // Two live areas of one name on two hosts: the one replicated here stays;
    // and so does one whose writer was gone only briefly (one forged listing).
    if (segment_->areas[r.local_index].state.load() == static_cast<uint32_t>(AreaState::kLive) ||
        r.writer_gone_since_ns == 0 || now_ns - r.writer_gone_since_ns < kNameTakeoverAfterNs) {
      continue;
    }
    RetireReplica(i, false, "a new area took its name");
  }
}

}  // namespace dsm
