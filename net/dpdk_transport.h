// The Transport over one DPDK port. Split by concern: opening and stats in
// dpdk_transport.cpp, sending (Reserve/Commit/Flush, pacing) in
// dpdk_transport_tx.cpp, receiving (Poll, WaitForFrames) in dpdk_transport_rx.cpp.
//
// Frames are built in place: Reserve hands out the payload area of an mbuf,
// kFrameHeaderBytes after its data start, and Commit writes the headers in
// front of it, so a payload is never copied on the way out. A long tail the
// caller offers by reference (CommitWithTail) is attached as a second,
// external segment, on devices that copy frames out as they send them.
#ifndef DSM_NET_DPDK_TRANSPORT_H_
#define DSM_NET_DPDK_TRANSPORT_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/device_args.h"
#include "net/dpdk_port.h"
#include "net/host_table.h"
#include "net/pacer.h"
#include "net/transport.h"
#include "net/tuning.h"

struct rte_mbuf;

namespace dsm::net {

class DpdkTransport final : public Transport {
 public:
  static std::unique_ptr<DpdkTransport> Open(const PortConfig& config, std::string* error);
  ~DpdkTransport() override;

  size_t max_payload_bytes() const override { return max_payload_bytes_; }
  uint8_t* Reserve(Destination dest) override;
  void Commit(size_t payload_bytes) override;
  std::unique_ptr<TailHold> NewTailHold() override;
  void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                      TailHold* hold) override;
  size_t DropTails(TailHold* hold) override;
  size_t Flush() override;
  size_t tx_backlog() const override { return tx_queue_.size(); }
  size_t Poll(size_t max, const RxFn& fn) override;
  void WaitForFrames(uint32_t timeout_us) override;
  int rx_wake_fd() const override { return port_->rx_wake_fd(); }
  TransportStats stats() const override { return stats_; }
  void Stop() override { port_->Stop(); }

  // Commit and CommitWithTail, and the frame also goes out on each port of
  // `also` (of this process, with the same own addresses: SendsSameFramesAs)
  // as the same mbuf, one reference per port rather than a copy. A multicast
  // frame of a link mesh. A tail is attached only if every port takes tails.
  void CommitShared(size_t payload_bytes, std::span<DpdkTransport* const> also);
  void CommitSharedWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                            TailHold* hold, std::span<DpdkTransport* const> also);
  // Whether a multicast frame built here is, byte for byte, what `other`
  // would build (own MAC, IPv4 and UDP port alike).
  bool SendsSameFramesAs(const DpdkTransport& other) const;
  // Whether frames may point at memory outside their mbuf (CommitWithTail):
  // only on devices that copy a frame out as they send it (dpdk_port.cpp).
  bool attaches_tails() const { return port_->tail_pool() != nullptr; }

  // What this transport listens as (the device's MAC when none was configured).
  const MacAddr& mac() const { return hosts_.mac(); }
  bool rx_interrupts() const { return port_->rx_interrupts(); }

 private:
  DpdkTransport(const PortConfig& config, std::unique_ptr<DpdkPort> port, HostTable hosts);

  // TX (dpdk_transport_tx.cpp)
  // Commits the reserved mbuf with `payload_bytes` of payload, the last
  // tail->data_len of them in `tail` (chained after it) if given.
  // It goes on the queue of each port of `also` too (CommitShared).
  void CommitFrame(size_t payload_bytes, rte_mbuf* tail, std::span<DpdkTransport* const> also);
  // The tail in an mbuf attached to `hold`'s memory, or nullptr where it is
  // to be copied instead.
  rte_mbuf* AttachTail(std::span<const uint8_t> tail, TailHold* hold);
  // Queues a committed frame (or drops it, counted, past the backlog).
  void Enqueue(rte_mbuf* m, bool urgent);
  size_t SendBurst(rte_mbuf** frames, uint16_t n);
  void WaitForPacer(uint64_t bits);
  // RX (dpdk_transport_rx.cpp)
  void Deliver(rte_mbuf* frame, const RxFn& fn, size_t* delivered);

  const uint16_t udp_port_;
  const size_t max_payload_bytes_;
  const uint64_t tx_stall_tsc_;
  std::unique_ptr<DpdkPort> port_;
  HostTable hosts_;
  Pacer pacer_;
  TransportStats stats_;

  rte_mbuf* reserved_ = nullptr;  // between Reserve and Commit
  Destination reserved_dest_;
  std::vector<rte_mbuf*> tx_queue_;  // committed, not yet flushed
  size_t urgent_queued_ = 0;         // the first this many of tx_queue_ are urgent
  uint64_t tx_progress_tsc_ = 0;     // when the device last took a frame (or had none to take)
  uint16_t next_ip_id_ = 0;

  // Frames received while arming RX interrupts, delivered by the next Poll.
  std::array<rte_mbuf*, kRxBurstFrames> rx_stash_{};
  uint16_t rx_stash_begin_ = 0;
  uint16_t rx_stash_end_ = 0;
};

}  // namespace dsm::net

#endif  // DSM_NET_DPDK_TRANSPORT_H_
