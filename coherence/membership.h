// Which hosts of the cluster are up: heartbeats heard, silence timed out,
// restarts noticed (a new incarnation). Pure: the caller passes the time.
#ifndef DSM_COHERENCE_MEMBERSHIP_H_
#define DSM_COHERENCE_MEMBERSHIP_H_

#include <cstdint>
#include <map>
#include <vector>

namespace dsm {

class Membership {
 public:
  Membership(const std::vector<uint16_t>& peers, uint64_t down_after_ns);

  enum class Event { kNone, kCameUp, kRestarted };
  // Something arrived from `host` (heartbeat: incarnation known; other frames: 0).
  // A host that went down comes back up only with a heartbeat: only its
  // incarnation tells whether it was silent (kCameUp) or restarted.
  Event Heard(uint16_t host, uint64_t incarnation, uint64_t now_ns);
  // Hosts that went silent for longer than down_after_ns since the last call.
  std::vector<uint16_t> Expire(uint64_t now_ns);

  bool known(uint16_t host) const { return peers_.count(host) != 0; }
  bool up(uint16_t host) const;
  uint64_t last_heard_ns(uint16_t host) const;
  const std::vector<uint16_t>& peer_ids() const { return ids_; }

 private:
  struct Peer {
    bool up = false;
    uint64_t last_heard_ns = 0;
    uint64_t incarnation = 0;
  };
  uint64_t down_after_ns_;
  std::map<uint16_t, Peer> peers_;
  std::vector<uint16_t> ids_;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_MEMBERSHIP_H_
