#include "net/link_mesh_transport.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "net/device_args.h"
#include "net/dpdk_transport.h"
#include "net/link_doorbell.h"
#include "net/tuning.h"

namespace dsm::net {
namespace {

class LinkMeshTransport final : public Transport {
 public:
  struct Port {
    uint16_t peer;
    std::unique_ptr<DpdkTransport> transport;
  };
  LinkMeshTransport(std::vector<Port> ports, std::unique_ptr<LinkDoorbell> doorbell)
      : ports_(std::move(ports)),
        doorbell_(std::move(doorbell)),
        rung_tx_frames_(ports_.size(), 0),
        awaited_(ports_.size(), false) {
    // A multicast frame is the same bytes on every link when the links share
    // the host's addresses (as a cluster file makes them): one mbuf then goes
    // out on all of them.
    for (size_t i = 1; i < ports_.size(); ++i) {
      if (ports_[i].transport->SendsSameFramesAs(*ports_.front().transport)) {
        share_with_.push_back(ports_[i].transport.get());
      } else {
        share_with_.clear();
        break;
      }
    }
  }
  ~LinkMeshTransport() override {
    // All links down first, then closed one by one: closing a memif port while
    // 22.11's interrupt thread still handles another link's disconnect crashed
    // that thread now and then (3 of 48 daemon exits).
    Stop();
    usleep(kMemifCloseSettleUs);
  }

  size_t max_payload_bytes() const override { return ports_.front().transport->max_payload_bytes(); }

  uint8_t* Reserve(Destination dest) override {
    reserved_ = nullptr;
    if (dest.multicast) {
      // Built in the first link's frame; Commit copies it to the others.
      reserved_ = ports_.front().transport.get();
    } else {
      for (Port& p : ports_) {
        if (p.peer == dest.host) reserved_ = p.transport.get();
      }
      if (reserved_ == nullptr) {
        ++unroutable_;  // no link to that host
        return nullptr;
      }
    }
    reserved_dest_ = dest;
    reserved_payload_ = reserved_->Reserve(dest);
    if (reserved_payload_ == nullptr) reserved_ = nullptr;
    return reserved_payload_;
  }

  void Commit(size_t payload_bytes) override {
    if (reserved_ == nullptr) return;
    if (Shared()) {
      ports_.front().transport->CommitShared(payload_bytes, share_with_);
      NoteAwaited();
      reserved_ = nullptr;
      return;
    }
    CopyToOtherLinks(payload_bytes, [&](Transport& link, uint8_t*) { link.Commit(payload_bytes); });
    reserved_->Commit(payload_bytes);
    NoteAwaited();
    reserved_ = nullptr;
  }

  // Every link is a DPDK port of this process: one hold serves them all.
  std::unique_ptr<TailHold> NewTailHold() override { return ports_.front().transport->NewTailHold(); }

  void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                      TailHold* hold) override {
    if (reserved_ == nullptr) return;
    if (Shared()) {
      ports_.front().transport->CommitSharedWithTail(reserved, head_bytes, tail, hold, share_with_);
      NoteAwaited();
      reserved_ = nullptr;
      return;
    }
    CopyToOtherLinks(head_bytes, [&](Transport& link, uint8_t* copy) {
      link.CommitWithTail(copy, head_bytes, tail, hold);
    });
    reserved_->CommitWithTail(reserved, head_bytes, tail, hold);
    NoteAwaited();
    reserved_ = nullptr;
  }

  size_t DropTails(TailHold* hold) override {
    size_t dropped = 0;
    for (Port& p : ports_) dropped += p.transport->DropTails(hold);
    return dropped;
  }

  size_t Flush() override {
    size_t sent = 0;
    for (size_t i = 0; i < ports_.size(); ++i) {
      sent += ports_[i].transport->Flush();
      if (!doorbell_) continue;
      // Frames went out on this link since the last ring (in this flush, or
      // when a full queue flushed itself in Commit), one of them not lazy:
      // wake its peer.
      const uint64_t tx = ports_[i].transport->stats().tx_frames;
      if (tx != rung_tx_frames_[i] && awaited_[i]) {
        rung_tx_frames_[i] = tx;
        awaited_[i] = false;
        doorbell_->Ring(ports_[i].peer);
      }
    }
    return sent;
  }

  // The emptiest link's: a link whose peer is slow or gone (multicast copies
  // go to every link, whatever the membership) must not hold up the others;
  // its own backlog is bounded (kMaxTxBacklogFrames, PortConfig::tx_stall_us).
  size_t tx_backlog() const override {
    size_t least = SIZE_MAX;
    for (const Port& p : ports_) least = std::min(least, p.transport->tx_backlog());
    return ports_.empty() ? 0 : least;
  }

  size_t Poll(size_t max, const RxFn& fn) override {
    // Rings are read before the links are looked at, once the last look
    // found nothing (about to sleep): a ring after this look is for frames
    // it has not seen. While frames flow they are left unread.
    if (doorbell_ && quiet_polls_ > 0) doorbell_->Drain();
    // Round robin from a moving start, so no link starves the others.
    size_t delivered = 0;
    for (size_t k = 0; k < ports_.size() && delivered < max; ++k) {
      Port& p = ports_[(next_poll_ + k) % ports_.size()];
      delivered += p.transport->Poll(max - delivered, fn);
    }
    next_poll_ = (next_poll_ + 1) % ports_.size();
    quiet_polls_ = delivered == 0 ? quiet_polls_ + 1 : 0;
    return delivered;
  }

  int rx_wake_fd() const override {
    if (doorbell_) return doorbell_->fd();
    return ports_.size() == 1 ? ports_.front().transport->rx_wake_fd() : -1;
  }

  void WaitForFrames(uint32_t timeout_us) override {
    // One link can wait on its RX interrupt; several would need one epoll set
    // over all their event fds, which DPDK's per-port API does not give us.
    if (ports_.size() == 1) {
      ports_.front().transport->WaitForFrames(timeout_us);
      return;
    }
    if (timeout_us == 0) return;
    timespec ts{static_cast<time_t>(timeout_us / 1'000'000), static_cast<long>(timeout_us % 1'000'000) * 1000};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
  }

  void Stop() override {
    for (Port& p : ports_) p.transport->Stop();
  }

  TransportStats stats() const override {
    TransportStats sum;
    for (const Port& p : ports_) sum += p.transport->stats();
    sum.tx_dropped += unroutable_;
    return sum;
  }

 private:
  // The reserved frame is multicast and goes out as one mbuf on every link.
  bool Shared() const {
    return reserved_dest_.multicast && share_with_.size() + 1 == ports_.size();
  }

  // A multicast frame is built in the first link's buffer: its first `bytes`
  // go to every other link's, which `commit(link, copy)` then sends.
  template <typename CommitFn>
  void CopyToOtherLinks(size_t bytes, CommitFn&& commit) {
    if (!reserved_dest_.multicast) return;
    for (size_t i = 1; i < ports_.size(); ++i) {
      uint8_t* copy = ports_[i].transport->Reserve(reserved_dest_);
      if (copy == nullptr) continue;  // counted by that link
      std::memcpy(copy, reserved_payload_, std::min(bytes, max_payload_bytes()));
      commit(*ports_[i].transport, copy);
    }
  }

  // The committed frame was not lazy: its link's peer is to be woken.
  void NoteAwaited() {
    if (reserved_dest_.lazy) return;
    for (size_t i = 0; i < ports_.size(); ++i) {
      if (reserved_dest_.multicast || ports_[i].transport.get() == reserved_) awaited_[i] = true;
    }
  }

  std::vector<Port> ports_;
  std::vector<DpdkTransport*> share_with_;  // links 1.. when frames can be shared, else empty
  Transport* reserved_ = nullptr;
  Destination reserved_dest_;
  uint8_t* reserved_payload_ = nullptr;
  uint64_t unroutable_ = 0;
  size_t next_poll_ = 0;
  std::unique_ptr<LinkDoorbell> doorbell_;  // null: the peers poll
  std::vector<uint64_t> rung_tx_frames_;    // per link: tx_frames at its last ring
  std::vector<bool> awaited_;               // per link: a frame not lazy since then
  uint32_t quiet_polls_ = 0;
};

// The directory every link's memif socket file is in, or "" if they are not
// all files in one directory (abstract sockets, other devices).
std::string SharedSocketDir(const std::vector<Link>& links) {
  std::string dir;
  for (const Link& link : links) {
    std::string ignored;
    const std::optional<ParsedDevargs> parsed = ParseDevargs(link.device, &ignored);
    if (!parsed || parsed->name.rfind("net_memif", 0) != 0) return "";
    std::string socket;
    bool abstract = false;
    for (const auto& [k, v] : parsed->args) {
      if (k == "socket") socket = v;
      if (k == "socket-abstract" && v != "no") abstract = true;
    }
    const size_t slash = socket.rfind('/');
    if (abstract || slash == std::string::npos || slash == 0) return "";
    const std::string d = socket.substr(0, slash);
    if (!dir.empty() && d != dir) return "";
    dir = d;
  }
  return dir;
}

}  // namespace

std::unique_ptr<Transport> OpenLinkMeshTransport(const PortConfig& base,
                                                 const std::vector<Link>& links,
                                                 std::string* error) {
  if (links.empty()) {
    *error = "a link mesh needs at least one link";
    return nullptr;
  }
  std::set<uint16_t> linked;
  std::vector<LinkMeshTransport::Port> ports;
  for (const Link& link : links) {
    auto peer = std::find_if(base.peers.begin(), base.peers.end(),
                             [&](const Peer& p) { return p.host_id == link.peer; });
    if (peer == base.peers.end()) {
      *error = "link to host " + std::to_string(link.peer) + ": not a peer in the cluster";
      return nullptr;
    }
    if (!linked.insert(link.peer).second) {
      *error = "two links to host " + std::to_string(link.peer);
      return nullptr;
    }
    PortConfig c = base;
    c.device = link.device;
    c.peers = {*peer};  // a link carries its peer's frames only
    c.ports_in_process = static_cast<uint32_t>(links.size());
    std::string why;
    std::unique_ptr<DpdkTransport> t = DpdkTransport::Open(c, &why);
    if (!t) {
      *error = "link to host " + std::to_string(link.peer) + ": " + why;
      return nullptr;
    }
    ports.push_back({link.peer, std::move(t)});
  }
  // Without a doorbell (no shared socket directory, or it cannot bind) the
  // peers find frames by polling, as before.
  std::unique_ptr<LinkDoorbell> doorbell;
  if (const std::string dir = SharedSocketDir(links); !dir.empty()) {
    std::string why;
    doorbell = LinkDoorbell::Open(dir, base.host_id, &why);
  }
  return std::make_unique<LinkMeshTransport>(std::move(ports), std::move(doorbell));
}

}  // namespace dsm::net
