// An in-memory Transport: transports opened on one MemoryWire exchange real
// Ethernet + IPv4 + UDP frames (udp_framing.h, checked on receipt exactly as
// the DPDK transport checks them) through process memory, so several
// daemons' remote sync can run in one process, without a device or root.
//
// The wire is a switch that knows every port's MAC: a unicast frame goes to
// the port with its destination MAC (lost if there is none: a host never
// opened or gone), a multicast or broadcast frame to every other port (each
// port keeps only the groups it joined). Frames between two ports keep their
// order. Drops, duplicates and reordering come from WithFaults around a
// transport, as with a device.
//
// Sending as DpdkTransport sends: Commit queues; Flush is when the "device"
// takes frames (at most MemoryWireOptions::tx_frames_per_flush per Flush;
// the rest stay queued, in order: tx_backlog()). A tail committed with a hold
// of NewTailHold() is read from the caller's memory at that moment, not at
// Commit: the frame is in use (TailHold::frames_in_use) until then, and
// whatever the memory holds when the frame is taken is what arrives. Commit
// flushes every kMaxQueuedTxFrames. Reserve never fails.
//
// Receiving: each port holds at most PortConfig::rx_ring frames not yet
// polled; more are lost (a full ring), counted in MemoryWire::frames_lost().
//
// A transport is used by one thread, as any Transport; the wire may be
// shared by transports on different threads (WaitForFrames wakes when a
// frame arrives).
#ifndef DSM_NET_MEMORY_TRANSPORT_H_
#define DSM_NET_MEMORY_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "net/transport.h"

namespace dsm::net {

struct MemoryWireOptions {
  // Frames each port's device takes per Flush (0: every queued frame). Fewer
  // leave a backlog and tails in use across Flushes, as a busy device ring does.
  size_t tx_frames_per_flush = 0;
  // Whether NewTailHold gives holds (tails read in place when the frame is
  // taken, as af_packet and memif do) or nullptr (tails copied at Commit, as
  // on net_ring or a NIC).
  bool tails_in_place = true;
};

class MemoryWire {
 public:
  explicit MemoryWire(const MemoryWireOptions& options = {});
  ~MemoryWire();
  MemoryWire(const MemoryWire&) = delete;
  MemoryWire& operator=(const MemoryWire&) = delete;

  // A port on this wire. Uses from `config`: host_id, mac (all zero:
  // 02:00:00:00:<host id>), ipv4, udp_port, mtu_bytes, rx_ring, peers and
  // groups, with the DPDK transport's meaning; the rest is ignored. nullptr
  // on failure, with `error` saying what is wrong (an address another port
  // has, an MTU that leaves no payload, a bad peer list). Transports keep
  // the switch alive: they may outlive this object. A transport destroyed
  // or stopped leaves the wire.
  std::unique_ptr<Transport> Open(const PortConfig& config, std::string* error);

  // Frames taken by a device that no port received: a unicast MAC no port
  // has, or a receive queue already holding rx_ring frames.
  uint64_t frames_lost() const;

  class Hub;  // the switch, shared with the transports

 private:
  std::shared_ptr<Hub> hub_;
};

}  // namespace dsm::net

#endif  // DSM_NET_MEMORY_TRANSPORT_H_
