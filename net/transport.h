// The frame transport between daemons: Ethernet + IPv4 + UDP frames whose UDP
// payload is opaque here (coherence/wire_format.h gives it meaning). Knows
// hosts (peers by id, MAC, IPv4) and nothing about areas. Only dsmd uses it.
//
// Thread ownership: a Transport is used by one thread (the daemon's loop).
#ifndef DSM_NET_TRANSPORT_H_
#define DSM_NET_TRANSPORT_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace dsm::net {

using MacAddr = std::array<uint8_t, 6>;

struct Peer {
  uint16_t host_id;
  MacAddr mac;
  uint32_t ipv4;  // host byte order
};

// Where a frame goes: one host, or a multicast group every subscribed host
// receives (one copy on the wire, whatever the number of receivers).
struct Destination {
  bool multicast = false;
  uint16_t host = 0;   // unicast: peer host id
  uint16_t group = 0;  // multicast: group id (mapped to 239.77.x.y and 01:00:5e:4d:x:y)
  // Goes ahead of the frames queued for the device without it (still after
  // those the device took, and after earlier urgent ones).
  bool urgent = false;
  // Nobody waits for it (a heartbeat): where the transport wakes receivers
  // itself (a link mesh's doorbell), it does not wake them for this frame;
  // they find it when they next look.
  bool lazy = false;
  static Destination Host(uint16_t id) { return {false, id, 0}; }
  static Destination Group(uint16_t g) { return {true, 0, g}; }
  Destination Urgent() const {
    Destination d = *this;
    d.urgent = true;
    return d;
  }
  Destination Lazy() const {
    Destination d = *this;
    d.lazy = true;
    return d;
  }
};

struct PortConfig {
  // DPDK device: "net_af_packet0,iface=veth-h1", "net_tap0,iface=dsmtap1",
  // "net_memif0,role=server,socket=/run/dsm/m.sock,socket-abstract=no",
  // "net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap", "net_ring0", or a PCI address.
  // net/ adds the size arguments a device needs for `mtu_bytes` (af_packet
  // framesz/blocksz/framecnt, memif bsize/rsize/socket-abstract=no) unless
  // they are given, and rejects given values that would fail silently.
  std::string device;
  std::vector<std::string> extra_eal_args;  // appended to the EAL command line
  std::string file_prefix;                  // EAL --file-prefix (unique per process)
  uint16_t host_id = 0;
  MacAddr mac{};  // all zero: the device's own
  uint32_t ipv4 = 0;
  uint16_t udp_port = 7400;
  uint32_t mtu_bytes = 1500;  // IP MTU; frames are up to mtu + 14 bytes
  uint32_t rx_ring = 4096;    // deep rings: shared cores lose frames with 512
  uint32_t tx_ring = 1024;
  uint32_t mbufs = 16383;
  uint64_t pace_bits_per_sec = 0;  // 0: unpaced
  // A device that has taken no frame for this long is not being drained (a
  // peer gone, a link down): the frames waiting for it are dropped
  // (tx_dropped) rather than held, so a sender does not wait on it forever.
  uint32_t tx_stall_us = 50000;  // 5 ms dropped frames of live, busy memif peers
  std::vector<Peer> peers;         // every other host; frames from others are dropped
  std::vector<uint16_t> groups;    // multicast groups to accept
  // Ports this process opens in all (a link mesh opens one per peer): DPDK's
  // memory is sized at the first open, for all of them.
  uint32_t ports_in_process = 1;
};

// A point-to-point link to one peer (OpenLinkMeshTransport).
struct Link {
  uint16_t peer = 0;
  std::string device;
};

struct TransportStats {
  uint64_t tx_frames = 0;
  uint64_t tx_bytes = 0;    // Ethernet frame bytes (headers, no FCS), as rx_bytes
  uint64_t tx_dropped = 0;  // no buffer, or the device refused it
  uint64_t tx_tail_frames = 0;  // of tx_frames committed: tails attached, not copied
  uint64_t rx_frames = 0;   // delivered to the caller
  uint64_t rx_bytes = 0;
  uint64_t rx_dropped_malformed = 0;       // not IPv4/UDP, bad IP header, truncated
  uint64_t rx_dropped_not_for_us = 0;      // other UDP port, MAC, IP or group
  uint64_t rx_dropped_unknown_source = 0;  // source IP not a peer
  uint64_t faults_dropped = 0;             // injected (tests only)
  uint64_t faults_duplicated = 0;
  uint64_t faults_reordered = 0;
  uint64_t faults_corrupted = 0;

  // Adds another port's counts (a transport over several ports).
  TransportStats& operator+=(const TransportStats& o) {
    tx_frames += o.tx_frames;
    tx_bytes += o.tx_bytes;
    tx_dropped += o.tx_dropped;
    tx_tail_frames += o.tx_tail_frames;
    rx_frames += o.rx_frames;
    rx_bytes += o.rx_bytes;
    rx_dropped_malformed += o.rx_dropped_malformed;
    rx_dropped_not_for_us += o.rx_dropped_not_for_us;
    rx_dropped_unknown_source += o.rx_dropped_unknown_source;
    faults_dropped += o.faults_dropped;
    faults_duplicated += o.faults_duplicated;
    faults_reordered += o.faults_reordered;
    faults_corrupted += o.faults_corrupted;
    return *this;
  }
};

// Memory that frames point into instead of carrying a copy of it (see
// Transport::CommitWithTail). Outlives its frames safely: destroyed while
// frames still use it, it goes when the last of them is done.
class TailHold {
 public:
  virtual ~TailHold() = default;
  // Frames queued or in the device that still read from the memory: it must
  // not change (nor be unmapped) until this is 0.
  virtual size_t frames_in_use() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Largest UDP payload one frame carries (mtu - IPv4 - UDP headers).
  virtual size_t max_payload_bytes() const = 0;

  // Starts a frame to `dest`: returns max_payload_bytes() of writable payload
  // memory, or nullptr when no buffer is free (counted in tx_dropped). A
  // second Reserve before Commit abandons the first frame.
  virtual uint8_t* Reserve(Destination dest) = 0;
  // Queues the reserved frame with `payload_bytes` of payload. A frame to an
  // unknown peer or longer than max_payload_bytes() is dropped (tx_dropped).
  virtual void Commit(size_t payload_bytes) = 0;

  // A hold for frames whose payload ends in memory the caller owns, or nullptr
  // where such a tail is copied into the frame anyway (a device that cannot
  // send one frame from two pieces, or one that passes the frame itself on).
  virtual std::unique_ptr<TailHold> NewTailHold() { return nullptr; }
  // Commits the reserved frame: `head_bytes` of payload written at `reserved`
  // (what Reserve returned), then `tail`. With a `hold` from NewTailHold the
  // frame points at `tail` instead of copying it (the caller leaves that
  // memory unchanged while hold->frames_in_use() > 0); otherwise, or for a
  // tail too short to be worth it, it is copied.
  virtual void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                              TailHold* hold) {
    (void)hold;
    const size_t room = max_payload_bytes() - std::min(head_bytes, max_payload_bytes());
    std::memcpy(reserved + head_bytes, tail.data(), std::min(tail.size(), room));
    Commit(head_bytes + tail.size());  // oversized: dropped and counted by Commit
  }
  // Drops the queued frames that point into `hold`'s memory (counted in
  // tx_dropped), for memory about to go away: frames the device has taken
  // already copied it. Returns the frames dropped; frames_in_use() is then 0.
  virtual size_t DropTails(TailHold* hold) {
    (void)hold;
    return 0;
  }
  // Sends everything queued (respecting the pacing rate: when paced it waits
  // until the last frame may go). Returns frames sent. Frames the device
  // refuses (its ring full until the peer drains it) stay queued for the
  // next Flush rather than being dropped, up to kMaxTxBacklogFrames, and as
  // long as the device takes some frame every PortConfig::tx_stall_us.
  virtual size_t Flush() = 0;
  // Frames committed and not yet taken by the device. A sender with more to
  // say should wait while this is high, as it would for a slow link.
  virtual size_t tx_backlog() const { return 0; }

  // Delivers up to `max` received frames: fn(udp_payload, source_host_id).
  // The payload is valid only during the call. Returns frames delivered.
  using RxFn = std::function<void(std::span<const uint8_t> payload, uint16_t source_host)>;
  virtual size_t Poll(size_t max, const RxFn& fn) = 0;

  // Blocks until frames may have arrived or `timeout_us` passed: RX interrupts
  // where the device has them (for waits of 1 ms or more; they count whole
  // milliseconds), a sleep otherwise. For adaptive polling.
  virtual void WaitForFrames(uint32_t timeout_us) = 0;
  // A descriptor that polls readable (EPOLLIN, level-triggered) while frames
  // wait to be delivered, for a caller that sleeps in an epoll set of its own
  // (dsmd): it wakes as frames come instead of on a timer. -1 where the device
  // gives none (memif, ring): poll after sleeps. The transport owns it.
  virtual int rx_wake_fd() const { return -1; }

  virtual TransportStats stats() const = 0;
  // Stops the device before the transport is destroyed (a transport over
  // several devices stops them all before closing any).
  virtual void Stop() {}
};

// Starts DPDK's EAL (once per process) and the port. nullptr on failure, with
// `error` saying what was wrong and how to fix it.
std::unique_ptr<Transport> OpenDpdkTransport(const PortConfig& config, std::string* error);

// Seeded fault injection, for tests: each frame sent is dropped, duplicated,
// held back behind the next frame (reordered) or has one payload byte flipped
// (corrupted), each with its probability.
struct FaultConfig {
  double drop = 0;
  double duplicate = 0;
  double reorder = 0;
  double corrupt = 0;
  uint64_t seed = 1;
};
std::unique_ptr<Transport> WithFaults(std::unique_ptr<Transport> inner, const FaultConfig& faults);

}  // namespace dsm::net

#endif  // DSM_NET_TRANSPORT_H_
