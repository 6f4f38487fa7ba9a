// Membership's verdicts and what remote sync does about them: a host heard
// from, up again, silent (down) or restarted with a new incarnation.
#include <spdlog/spdlog.h>

#include "daemon/remote_sync.h"

namespace dsm {

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

void RemoteSync::ForgetHostSubscriptions(uint16_t host) {
  for (auto& [index, e] : exports_) e.area->Unsubscribe(host);
}

}  // namespace dsm
