// Ethernet II + IPv4 + UDP framing of the transport's payloads. Pure byte
// handling (no DPDK), so that every malformed case is unit-tested.
//
// Frames sent: no VLAN tag, IPv4 without options, DF set, UDP checksum 0 (the
// payload carries its own XXH3), source and destination port both `udp_port`.
// Frames received are checked in the order below and the first failed check
// decides the drop counter (see RxVerdict).
#ifndef DSM_NET_UDP_FRAMING_H_
#define DSM_NET_UDP_FRAMING_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "net/host_table.h"
#include "net/transport.h"

namespace dsm::net {

inline constexpr size_t kEthernetHeaderBytes = 14;
inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr size_t kUdpHeaderBytes = 8;
inline constexpr size_t kFrameHeaderBytes =
    kEthernetHeaderBytes + kIpv4HeaderBytes + kUdpHeaderBytes;
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint8_t kIpProtoUdp = 17;

struct FrameHeaderFields {
  MacAddr src_mac;
  MacAddr dst_mac;
  uint32_t src_ipv4;  // host byte order
  uint32_t dst_ipv4;
  uint16_t udp_port;
  uint16_t ip_id;
};

// Writes the kFrameHeaderBytes of headers at `frame` for a payload of
// `payload_bytes` that follows them (payload_bytes <= 65535 - 28).
void WriteFrameHeaders(uint8_t* frame, const FrameHeaderFields& fields, size_t payload_bytes);

// The Internet checksum of an IPv4 header (RFC 1071); 0 when verifying a
// header that carries a correct checksum.
uint16_t Ipv4HeaderChecksum(const uint8_t* header, size_t bytes);

// Why a received frame was dropped, in the order checks run.
enum class RxCheck : uint8_t {
  kOk,
  kTruncatedEthernet,  // shorter than an Ethernet header      -> malformed
  kDestMac,            // not our MAC, a joined group, broadcast -> not for us
  kNotIpv4,            // ethertype other than IPv4 (VLAN, ARP, IPv6) -> malformed
  kBadIpHeader,        // truncated, version != 4, IHL < 5 or beyond the frame -> malformed
  kBadIpChecksum,      // -> malformed
  kIpTotalLength,      // total length < header or > what the frame holds -> malformed
  kFragment,           // MF or a fragment offset: we never fragment -> malformed
  kNotUdp,             // -> malformed
  kDestIp,             // not our IPv4 nor a joined group's -> not for us
  kBadUdpLength,       // UDP length != IP payload length -> malformed
  kDestPort,           // -> not for us
  kUnknownSource,      // source IPv4 is not a peer -> unknown source
};

enum class RxVerdict : uint8_t { kAccept, kMalformed, kNotForUs, kUnknownSource };
RxVerdict VerdictOf(RxCheck check);
const char* RxCheckName(RxCheck check);

struct RxFrame {
  RxCheck check = RxCheck::kOk;
  std::span<const uint8_t> payload;  // the UDP payload when check == kOk
  uint16_t source_host = 0;
};

RxFrame ParseFrame(std::span<const uint8_t> frame, const HostTable& hosts, uint16_t udp_port);

// Parses a received Ethernet frame of `frame.size()` bytes and counts it in
// `stats` (received, or dropped by the verdict). Returns the frame; its
// payload is for the caller when check == kOk.
RxFrame ParseAndCount(std::span<const uint8_t> frame, const HostTable& hosts, uint16_t udp_port,
                      TransportStats* stats);

}  // namespace dsm::net

#endif  // DSM_NET_UDP_FRAMING_H_
