// Builds and validates the DPDK device arguments for one port from the
// transport's MTU, so that every device carries whole frames in one buffer.
// Pure string and integer work, unit-tested without DPDK.
//
// Each virtual device has configurations DPDK accepts and then silently
// misbehaves with (net/README.md, Devices); those are rejected here with the fix:
//  - net_af_packet: framesz >= frame + 66 in steps of 16; blocksz a multiple of
//    the page size and an exact multiple of framesz (else TX stalls after ~2049
//    frames); framecnt a multiple of the frames per block; qpairs=1. RX mbufs
//    must hold framesz - 32 bytes in one segment (the PMD has no RX scatter).
//  - net_memif: bsize >= the largest frame (22.11 corrupts frames split across
//    buffers); socket-abstract=no unless given (abstract sockets do not cross
//    network namespaces); zero-copy is refused (it needs shared EAL memory).
//  - net_tap: no jumbo frames (largest frame 1522): mtu <= 1500.
//  - net_af_xdp: one umem chunk per frame and no multi-buffer in 22.11: mtu <=
//    1500 (larger frames are dropped unseen); iface required; start_queue=0
//    and queue_count=1 unless given (a veth has one queue).
#ifndef DSM_NET_DEVICE_ARGS_H_
#define DSM_NET_DEVICE_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dsm::net {

enum class DeviceKind { kAfPacket, kAfXdp, kMemif, kTap, kRing, kPcap, kNull, kOtherVdev, kPci };

// DPDK's RTE_PKTMBUF_HEADROOM (checked against it where DPDK is included).
inline constexpr uint32_t kMbufHeadroomBytes = 128;
inline constexpr uint32_t kMinMtuBytes = 576;
// Frames must fit one mbuf, whose data room (with headroom) is 16-bit.
inline constexpr uint32_t kMaxMbufDataRoomBytes = 65535;

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kOtherVdev;
  std::string name;                 // the device's bus name: "net_af_packet0", "0000:01:00.0"
  std::string devargs;              // what rte_dev_probe gets: the name and every argument
  std::string iface;                // af_packet/tap: the kernel interface, if named
  uint32_t max_frame_bytes = 0;     // mtu + 14 (no VLAN, no FCS)
  uint32_t rx_data_room_bytes = 0;  // mbuf data room incl. headroom: one RX frame, one segment
  // Virtual devices take their frame size from the kernel interface and the
  // devargs; rte_eth_dev_set_mtu cannot raise it (af_packet answers -22 above 1500).
  bool mtu_from_devargs = true;
  // af_packet only (0 otherwise): the ring geometry chosen or validated.
  uint32_t framesz = 0, blocksz = 0, framecnt = 0;
  // memif only (0 otherwise).
  uint32_t bsize = 0, rsize_log2 = 0;
  bool memif_server = false;      // role=server (22.11's default role is client)
  std::string memif_socket_file;  // the socket's path when it is a file (not abstract)
};

// `device` as in PortConfig::device. `ring_frames` sizes the device's own rings
// where it has them (af_packet framecnt, memif rsize). `page_bytes` is the
// kernel's page size (tests pass it; 0 means this machine's).
std::optional<DeviceSpec> BuildDeviceSpec(const std::string& device, uint32_t mtu_bytes,
                                          uint32_t ring_frames, std::string* error,
                                          uint32_t page_bytes = 0);

// A port's ring and pool sizes, in frames (PortConfig's rx_ring, tx_ring, mbufs).
struct PortCounts {
  uint32_t rx_ring = 0, tx_ring = 0, mbufs = 0;
};
// PortConfig's counts are chosen for frames of up to kCountedFrameBytes (MTU
// 9000). Larger frames (a veth takes up to 64 KiB) get counts that hold the
// same bytes, each at least `floor`: at MTU 64000, 16,383 mbufs would be 1 GiB
// per port and af_packet's two kernel rings of 4,096 slots another 512 MiB.
// Counts for smaller frames are returned unchanged.
inline constexpr uint32_t kCountedFrameBytes = 9014;
PortCounts CountsForMtu(PortCounts counts, uint32_t mtu_bytes, PortCounts floor);

// "name,k=v,k2=v2" -> name and ordered key/value pairs (a bare word has value "").
struct ParsedDevargs {
  std::string name;
  std::vector<std::pair<std::string, std::string>> args;
};
std::optional<ParsedDevargs> ParseDevargs(const std::string& device, std::string* error);

// True for "0000:01:00.0" and "01:00.0" (PCI bus:device.function, optional domain).
bool LooksLikePciAddress(const std::string& name);

}  // namespace dsm::net

#endif  // DSM_NET_DEVICE_ARGS_H_
