#include "coherence/membership.h"

namespace dsm {

Membership::Membership(const std::vector<uint16_t>& peers, uint64_t down_after_ns)
    : down_after_ns_(down_after_ns), ids_(peers) {
  for (uint16_t id : peers) peers_[id] = Peer{};
}

Membership::Event Membership::Heard(uint16_t host, uint64_t incarnation, uint64_t now_ns) {
  auto it = peers_.find(host);
  if (it == peers_.end()) return Event::kNone;
  Peer& p = it->second;
  p.last_heard_ns = now_ns;
  if (incarnation == 0 && !p.up && p.incarnation != 0) return Event::kNone;  // wait for its heartbeat
  Event e = Event::kNone;
  if (incarnation != 0 && p.incarnation != 0 && incarnation != p.incarnation) {
    e = Event::kRestarted;
  } else if (!p.up) {
    e = Event::kCameUp;
  }
  if (incarnation != 0) p.incarnation = incarnation;
  p.up = true;
  return e;
}

std::vector<uint16_t> Membership::Expire(uint64_t now_ns) {
  std::vector<uint16_t> down;
  for (auto& [id, p] : peers_) {
    if (p.up && now_ns - p.last_heard_ns > down_after_ns_) {
      p.up = false;
      down.push_back(id);
    }
  }
  return down;
}

bool Membership::up(uint16_t host) const {
  auto it = peers_.find(host);
  return it != peers_.end() && it->second.up;
}

uint64_t Membership::last_heard_ns(uint16_t host) const {
  auto it = peers_.find(host);
  return it == peers_.end() ? 0 : it->second.last_heard_ns;
}

}  // namespace dsm
