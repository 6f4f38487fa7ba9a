#include "coherence/membership.h"

namespace dsm {

Membership::Membership(const std::vector<uint16_t>& peers, uint64_t down_after_ns,
                       uint64_t hello_retry_ns, uint64_t seed)
    : down_after_ns_(down_after_ns), hello_retry_ns_(hello_retry_ns), rng_(seed), ids_(peers) {
  for (uint16_t id : peers) peers_[id] = Peer{};
}

uint64_t Membership::NextNonce() {
  uint64_t z;
  do {  // splitmix64; 0 means "no hello outstanding"
    z = (rng_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
  } while (z == 0);
  return z;
}

Membership::Admission Membership::Admit(uint16_t host, uint32_t incarnation, uint64_t now_ns) {
  Admission a;
  auto it = peers_.find(host);
  if (it == peers_.end()) return a;
  Peer& p = it->second;
  if (p.incarnation == 0 && incarnation != 0 && p.hello_nonce == 0) p.incarnation = incarnation;
  if (incarnation != 0 && incarnation == p.incarnation) {
    a.accepted = true;
    a.event = p.up ? Event::kNone : Event::kCameUp;
    p.up = true;
    p.last_heard_ns = now_ns;
    return a;
  }
  // A restart, or a frame that is not what it claims: ask the host. The nonce stays the same until answered, so a slow reply still counts.
  if (p.hello_nonce == 0) {
    p.hello_nonce = NextNonce();
  } else if (now_ns - p.hello_sent_ns < hello_retry_ns_) {
    return a;
  }
  p.hello_sent_ns = now_ns;
  a.hello_nonce = p.hello_nonce;
  return a;
}

Membership::Event Membership::Confirm(uint16_t host, uint64_t nonce, uint32_t incarnation,
                                      uint64_t now_ns) {
  auto it = peers_.find(host);
  if (it == peers_.end()) return Event::kNone;
  Peer& p = it->second;
  if (nonce == 0 || nonce != p.hello_nonce || incarnation == 0) return Event::kNone;
  p.hello_nonce = 0;
  Event e = Event::kNone;
  if (p.incarnation != 0 && p.incarnation != incarnation) {
    e = Event::kRestarted;
  } else if (!p.up) {
    e = Event::kCameUp;
  }
  p.incarnation = incarnation;
  p.up = true;
  p.last_heard_ns = now_ns;
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

uint32_t Membership::incarnation(uint16_t host) const {
  auto it = peers_.find(host);
  return it == peers_.end() ? 0 : it->second.incarnation;
}

}  // namespace dsm
