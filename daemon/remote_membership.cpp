// Membership's verdicts and what remote sync does about them: a host's
// incarnation confirmed by a hello, a host up again, silent (down) or
// restarted with a new incarnation.
#include <spdlog/spdlog.h>

#include <cstring>

#include "daemon/remote_sync.h"
#include "libdsm/contract/clock.h"

namespace dsm {

bool RemoteSync::Admit(const wire::Frame& f, uint16_t host, uint64_t now_ns) {
  const Membership::Admission a = membership_->Admit(host, f.header.incarnation, now_ns);
  if (a.hello_nonce != 0) {
    wire::HelloBody hello{a.hello_nonce};
    SendSmall(net::Destination::Host(host), wire::FrameType::kHello, 0, 0, 0, 0, 0, 0,
              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&hello), sizeof(hello)));
  }
  if (!a.accepted) {
    Drop(wire::DropReason::kUnconfirmed);
    return false;
  }
  OnMembershipEvent(host, a.event);
  return true;
}

void RemoteSync::OnHello(const wire::Frame& f, uint16_t host) {
  // Answered whoever asks: the reply says only who we are, to that host.
  SendSmall(net::Destination::Host(host), wire::FrameType::kHelloReply, 0, 0, 0, 0, 0, 0, f.body);
}

void RemoteSync::OnHelloReply(const wire::Frame& f, uint16_t host, uint64_t now_ns) {
  wire::HelloBody reply;
  std::memcpy(&reply, f.body.data(), sizeof(reply));
  OnMembershipEvent(host, membership_->Confirm(host, reply.nonce, f.header.incarnation, now_ns));
}

void RemoteSync::OnMembershipEvent(uint16_t host, Membership::Event e) {
  if (e != Membership::Event::kNone) PublishState();  // dsmctl sees it at once
  switch (e) {
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
  spdlog::info("host {} is up (incarnation {:08x})", host, membership_->incarnation(host));
  for (auto& r : replicas_) {
    if (r->origin_host == host) SetWriterAlive(*r, true, MonotonicNs());
  }
  // Same incarnation (it was only silent): what it missed goes now.
  for (auto& [index, e] : exports_) e.area->SetHostUp(host, true);
}

void RemoteSync::OnHostDown(uint16_t host) {
  spdlog::warn("host {} is down", host);
  for (auto& r : replicas_) {
    if (r->origin_host == host) SetWriterAlive(*r, false, MonotonicNs());
  }
  // It stays subscribed, but is sent nothing and holds nothing back (the
  // writer's free, the shadow) until it is heard from again.
  for (auto& [index, e] : exports_) e.area->SetHostUp(host, false);
}

void RemoteSync::OnHostRestarted(uint16_t host) {
  spdlog::warn("host {} restarted (incarnation {:08x})", host, membership_->incarnation(host));
  // Its replicas of our areas went with its old incarnation.
  for (auto& [index, e] : exports_) e.area->Unsubscribe(host);
  // And its areas with its processes: replicas of them keep their last
  // version for the readers holding them, and a new area of the same name
  // there is a new replica here, from its first version.
  for (size_t i = replicas_.size(); i-- > 0;) {
    if (replicas_[i]->origin_host == host) RetireReplica(i, false, "its host restarted");
  }
  remote_dir_.erase(host);
  listings_.Forget(host);
}

}  // namespace dsm
