// Which hosts of the cluster are up, and which incarnation of each one's daemon
// is believed. Every frame carries its sender's incarnation (drawn by the
// daemon at start). The first incarnation heard from a host is believed (there
// is nothing of an older one to protect). A frame of any other incarnation is
// refused, and the caller sends that host a HELLO with a nonce drawn here;
// only a HELLO_REPLY echoing that nonce changes the belief (a restart). One
// forged, stale or corrupted frame therefore never makes a host look
// restarted, and frames of a new incarnation never reach state kept for the
// old one. Pure: the caller passes the time.
#ifndef DSM_COHERENCE_MEMBERSHIP_H_
#define DSM_COHERENCE_MEMBERSHIP_H_

#include <cstdint>
#include <map>
#include <vector>

namespace dsm {

class Membership {
 public:
  // `hello_retry_ns`: how long a HELLO goes unanswered before it is sent
  // again. `seed` draws the nonces (the daemon seeds it from getrandom).
  Membership(const std::vector<uint16_t>& peers, uint64_t down_after_ns, uint64_t hello_retry_ns,
             uint64_t seed);

  enum class Event { kNone, kCameUp, kRestarted };
  struct Admission {
    bool accepted = false;        // the sender is the incarnation believed: act on the frame
    Event event = Event::kNone;   // accepted: kCameUp when the host was down
    uint64_t hello_nonce = 0;     // not 0: send the host a HELLO with this nonce
  };
  // A frame of `incarnation` came from `host` (a host of the cluster).
  Admission Admit(uint16_t host, uint32_t incarnation, uint64_t now_ns);
  // `host` answered a HELLO with `nonce`, its header saying `incarnation`.
  // kRestarted when that differs from the incarnation believed until now.
  // A nonce that is not the one outstanding changes nothing.
  Event Confirm(uint16_t host, uint64_t nonce, uint32_t incarnation, uint64_t now_ns);
  // Hosts that went silent for longer than down_after_ns since the last call.
  std::vector<uint16_t> Expire(uint64_t now_ns);

  bool known(uint16_t host) const { return peers_.count(host) != 0; }
  bool up(uint16_t host) const;
  uint64_t last_heard_ns(uint16_t host) const;
  // The confirmed incarnation of `host`, 0 before the first confirmation.
  uint32_t incarnation(uint16_t host) const;
  const std::vector<uint16_t>& peer_ids() const { return ids_; }

 private:
  struct Peer {
    bool up = false;
    uint64_t last_heard_ns = 0;
    uint32_t incarnation = 0;  // confirmed
    uint64_t hello_nonce = 0;  // outstanding, 0: none
    uint64_t hello_sent_ns = 0;
  };
  uint64_t NextNonce();

  uint64_t down_after_ns_;
  uint64_t hello_retry_ns_;
  uint64_t rng_;
  std::map<uint16_t, Peer> peers_;
  std::vector<uint16_t> ids_;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_MEMBERSHIP_H_
