#include "coherence/replica_sender.h"

#include <algorithm>

namespace dsm {

ReplicaSender::ReplicaSender(size_t area_bytes, bool shared_transfers)
    : area_bytes_(area_bytes), shared_transfers_(shared_transfers) {}

void ReplicaSender::Subscribe(uint16_t host) {
  hosts_[host] = std::make_unique<HostState>(area_bytes_);
}

void ReplicaSender::Unsubscribe(uint16_t host) { hosts_.erase(host); }

void ReplicaSender::SetHostUp(uint16_t host, bool up) {
  auto it = hosts_.find(host);
  if (it == hosts_.end() || it->second->up == up) return;
  HostState& h = *it->second;
  h.up = up;
  if (up) {
    // What it missed meanwhile goes now, with what was in flight (still in `inflight`).
    h.in_flight = false;
    h.backoffs = 0;
  }
}

bool ReplicaSender::up(uint16_t host) const {
  auto it = hosts_.find(host);
  return it != hosts_.end() && it->second->up;
}

size_t ReplicaSender::reachable() const {
  return static_cast<size_t>(
      std::count_if(hosts_.begin(), hosts_.end(), [](const auto& kv) { return kv.second->up; }));
}

std::shared_ptr<LineSet> ReplicaSender::FreeSet() {
  for (const std::shared_ptr<LineSet>& set : pool_) {
    if (set.use_count() == 1) {
      set->Clear();
      return set;
    }
  }
  auto set = std::make_shared<LineSet>(area_bytes_);
  if (pool_.size() < kMaxPooledSets) pool_.push_back(set);
  return set;
}

void ReplicaSender::Collected(uint64_t version, const LineSet& changed) {
  std::shared_ptr<LineSet> copy = FreeSet();
  copy->Merge(changed);
  Collected(version, std::move(copy));
}

void ReplicaSender::Collected(uint64_t version, std::shared_ptr<LineSet> changed_set) {
  const LineSet& changed = *changed_set;
  version_ = version;
  have_version_ = true;
  collected_ = std::move(changed_set);
  // Also for hosts still waiting for a whole-area transfer: what changes after
  // the version that transfer carries must follow it. A host that lacked
  // nothing lacks exactly these lines: it shares the one copy.
  for (auto& [id, h] : hosts_) {
    if (h->unacked.Empty()) {
      h->unacked.Clear();
      h->unacked.shared = collected_;
    } else {
      h->unacked.Add(changed);
    }
  }
}

void ReplicaSender::OnAck(uint16_t host, uint64_t complete_version, uint64_t now_ns) {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return;
  HostState& h = *it->second;
  h.backoffs = 0;  // it answers
  if (h.has_base && complete_version < h.acked) {
    // It went backwards: the host lost its copy. Start again from scratch.
    h.has_base = false;
    h.acked = 0;
    h.unacked.Clear();
    h.inflight.Clear();
    h.in_flight = false;
    return;
  }
  if (h.in_flight && complete_version >= h.inflight_version) {
    if (now_ns > h.sent_ns && !h.resent) {
      // Karn: only transfers sent once time their acknowledgement.
      const uint64_t sample = now_ns - h.sent_ns;
      if (!h.rtt_known) {
        h.srtt_ns = sample;
        h.rttvar_ns = sample / 2;
        h.rtt_known = true;
      } else {
        const uint64_t deviation = sample > h.srtt_ns ? sample - h.srtt_ns : h.srtt_ns - sample;
        h.rttvar_ns = (3 * h.rttvar_ns + deviation) / 4;
        h.srtt_ns = (7 * h.srtt_ns + sample) / 8;
      }
    }
    h.inflight.Clear();
    h.in_flight = false;
    h.has_base = true;
    h.acked = complete_version;
  } else if (h.has_base && complete_version > h.acked) {
    h.acked = complete_version;  // an older transfer completed; keep what is in flight
  }
}

void ReplicaSender::OnAckNothing(uint16_t host) {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return;
  it->second->backoffs = 0;  // it answers
  if (!it->second->has_base) return;  // its first transfer is coming
  HostState& h = *it->second;
  h.has_base = false;  // it lost its copy: start again from the whole area
  h.acked = 0;
  h.unacked.Clear();
  h.inflight.Clear();
  h.in_flight = false;
}

void ReplicaSender::OnLostTransfer(uint16_t host, uint32_t transfer_id) {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return;
  HostState& h = *it->second;
  // An older transfer's report is stale: a newer one is already on its way.
  if (h.in_flight && h.transfer_id == transfer_id) h.in_flight = false;
}

void ReplicaSender::OnResent(uint16_t host, uint32_t transfer_id, uint64_t now_ns) {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return;
  HostState& h = *it->second;
  if (!h.in_flight || h.transfer_id != transfer_id) return;
  h.sent_ns = now_ns;
  h.resent = true;  // Karn: its acknowledgement no longer times one sending
}

bool ReplicaSender::Due(const HostState& h, uint64_t now_ns, uint64_t rto_ns) const {
  if (!have_version_ || !h.up) return false;
  if (h.has_base && h.acked >= version_) return false;  // up to date
  if (!h.in_flight) return true;
  return now_ns - h.sent_ns >= HostRto(h, rto_ns);  // lost or slow: send the newest union
}

uint64_t ReplicaSender::HostRto(const HostState& h, uint64_t rto_ns) {
  const uint64_t rto =
      h.rtt_known ? std::max(rto_ns, std::min(h.srtt_ns + 4 * h.rttvar_ns, kMaxRtoNs)) : rto_ns;
  return std::max(rto, std::min(rto << h.backoffs, kMaxRtoNs));
}

bool ReplicaSender::AnyDue(uint64_t now_ns, uint64_t rto_ns) const {
  for (const auto& [id, h] : hosts_) {
    if (Due(*h, now_ns, rto_ns)) return true;
  }
  return false;
}

bool ReplicaSender::NextTransfer(uint64_t now_ns, uint64_t rto_ns, Transfer* out) {
  // Hosts that hold a version share one delta even when they acknowledged
  // different versions: the union of what each lacks, from the oldest base, is
  // correct for every one of them (lines changed since the older base include
  // those changed since a newer one, with the newest content), and one
  // multicast copy beats one unicast per state. Hosts with nothing share a full
  // transfer.
  const HostState* first = nullptr;
  uint64_t base = UINT64_MAX;
  out->hosts.clear();
  for (auto& [id, h] : hosts_) {
    if (!Due(*h, now_ns, rto_ns)) continue;
    if (!first) first = h.get();
    if (h->has_base != first->has_base) continue;
    out->hosts.push_back(id);
    if (h->has_base) base = std::min(base, h->acked);
    if (!shared_transfers_) break;
  }
  if (!first) return false;
  out->version = version_;
  out->full = !first->has_base;
  out->base = first->has_base ? base : 0;
  out->transfer_id = next_transfer_id_++;
  out->lines.reset();  // back to the pool unless a sent transfer still holds it
  const bool collected_only =
      !out->full && std::all_of(out->hosts.begin(), out->hosts.end(), [&](uint16_t id) {
        const HostState& h = *hosts_[id];
        return h.unacked.shared == collected_ && h.inflight.Empty();
      });
  if (collected_only) {
    out->lines = collected_;
    return true;
  }
  std::shared_ptr<LineSet> lines = FreeSet();
  if (out->full) {
    lines->AddAll();
  } else {
    for (uint16_t id : out->hosts) {
      hosts_[id]->unacked.AddTo(lines.get());
      hosts_[id]->inflight.AddTo(lines.get());
    }
  }
  out->lines = std::move(lines);
  return true;
}

void ReplicaSender::Sent(const Transfer& t, uint64_t now_ns) {
  for (uint16_t id : t.hosts) {
    auto it = hosts_.find(id);
    if (it == hosts_.end()) continue;
    HostState& h = *it->second;
    if (h.inflight.Empty()) {
      std::swap(h.inflight, h.unacked);  // the usual case: no copy
    } else {
      if (h.unacked.shared) {
        h.inflight.Add(*h.unacked.shared);
      } else {
        h.inflight.Add(h.unacked.own);
      }
    }
    h.unacked.Clear();
    // Still in flight: the last one timed out without a word from the host.
    if (h.in_flight && h.backoffs < kMaxBackoffs) ++h.backoffs;
    h.resent = h.in_flight;
    h.in_flight = true;
    h.inflight_version = t.version;
    h.sent_ns = now_ns;
    h.transfer_id = t.transfer_id;
  }
}

bool ReplicaSender::AwaitingAcks(uint64_t now_ns, uint64_t rto_ns) const {
  for (const auto& [id, h] : hosts_) {
    if (h->up && h->in_flight && now_ns - h->sent_ns < rto_ns) return true;
  }
  return false;
}

bool ReplicaSender::InFlight(uint16_t host, uint32_t transfer_id) const {
  auto it = hosts_.find(host);
  return it != hosts_.end() && it->second->in_flight && it->second->transfer_id == transfer_id;
}

uint64_t ReplicaSender::acked(uint16_t host) const {
  auto it = hosts_.find(host);
  return it == hosts_.end() ? 0 : it->second->acked;
}

uint64_t ReplicaSender::MinAcked() const {
  uint64_t min = UINT64_MAX;
  for (const auto& [host, h] : hosts_) {
    if (h->up) min = std::min(min, h->has_base ? h->acked : 0);
  }
  return min;
}

}  // namespace dsm
