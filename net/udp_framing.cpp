#include "net/udp_framing.h"

#include <cstring>

#include "net/tuning.h"

namespace dsm::net {
namespace {

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void Put32(uint8_t* p, uint32_t v) {
  Put16(p, static_cast<uint16_t>(v >> 16));
  Put16(p + 2, static_cast<uint16_t>(v));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Get32(const uint8_t* p) { return uint32_t{Get16(p)} << 16 | Get16(p + 2); }

RxFrame Drop(RxCheck check) { return RxFrame{check, {}, 0}; }

}  // namespace

uint16_t Ipv4HeaderChecksum(const uint8_t* header, size_t bytes) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < bytes; i += 2) sum += Get16(header + i);
  if (bytes & 1) sum += uint32_t{header[bytes - 1]} << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

void WriteFrameHeaders(uint8_t* frame, const FrameHeaderFields& f, size_t payload_bytes) {
  uint8_t* eth = frame;
  std::memcpy(eth, f.dst_mac.data(), 6);
  std::memcpy(eth + 6, f.src_mac.data(), 6);
  Put16(eth + 12, kEtherTypeIpv4);

  uint8_t* ip = eth + kEthernetHeaderBytes;
  ip[0] = 0x45;  // version 4, IHL 5 words
  ip[1] = 0;     // DSCP/ECN
  Put16(ip + 2, static_cast<uint16_t>(kIpv4HeaderBytes + kUdpHeaderBytes + payload_bytes));
  Put16(ip + 4, f.ip_id);
  Put16(ip + 6, 0x4000);  // DF, offset 0
  ip[8] = kIpv4Ttl;
  ip[9] = kIpProtoUdp;
  Put16(ip + 10, 0);
  Put32(ip + 12, f.src_ipv4);
  Put32(ip + 16, f.dst_ipv4);
  Put16(ip + 10, Ipv4HeaderChecksum(ip, kIpv4HeaderBytes));

  uint8_t* udp = ip + kIpv4HeaderBytes;
  Put16(udp, f.udp_port);
  Put16(udp + 2, f.udp_port);
  Put16(udp + 4, static_cast<uint16_t>(kUdpHeaderBytes + payload_bytes));
  Put16(udp + 6, 0);  // no UDP checksum: the payload has its own
}

RxFrame ParseFrame(std::span<const uint8_t> frame, const HostTable& hosts, uint16_t udp_port) {
  if (frame.size() < kEthernetHeaderBytes) return Drop(RxCheck::kTruncatedEthernet);
  const uint8_t* eth = frame.data();
  if (!hosts.AcceptsDestMac(eth)) return Drop(RxCheck::kDestMac);
  if (Get16(eth + 12) != kEtherTypeIpv4) return Drop(RxCheck::kNotIpv4);

  const uint8_t* ip = eth + kEthernetHeaderBytes;
  const size_t ip_room = frame.size() - kEthernetHeaderBytes;  // may include Ethernet padding
  if (ip_room < kIpv4HeaderBytes || (ip[0] >> 4) != 4) return Drop(RxCheck::kBadIpHeader);
  const size_t ihl_bytes = size_t{ip[0] & 0x0fu} * 4;
  if (ihl_bytes < kIpv4HeaderBytes || ihl_bytes > ip_room) return Drop(RxCheck::kBadIpHeader);
  if (Ipv4HeaderChecksum(ip, ihl_bytes) != 0) return Drop(RxCheck::kBadIpChecksum);
  const size_t total = Get16(ip + 2);
  if (total < ihl_bytes + kUdpHeaderBytes || total > ip_room) return Drop(RxCheck::kIpTotalLength);
  if ((Get16(ip + 6) & 0x3fff) != 0) return Drop(RxCheck::kFragment);
  if (ip[9] != kIpProtoUdp) return Drop(RxCheck::kNotUdp);
  if (!hosts.AcceptsDestIpv4(Get32(ip + 16))) return Drop(RxCheck::kDestIp);

  const uint8_t* udp = ip + ihl_bytes;
  const size_t udp_bytes = Get16(udp + 4);
  if (udp_bytes != total - ihl_bytes) return Drop(RxCheck::kBadUdpLength);
  if (Get16(udp + 2) != udp_port) return Drop(RxCheck::kDestPort);

  const std::optional<uint16_t> source = hosts.HostOfIpv4(Get32(ip + 12));
  if (!source) return Drop(RxCheck::kUnknownSource);
  return RxFrame{RxCheck::kOk, {udp + kUdpHeaderBytes, udp_bytes - kUdpHeaderBytes}, *source};
}

RxVerdict VerdictOf(RxCheck check) {
  switch (check) {
    case RxCheck::kOk:
      return RxVerdict::kAccept;
    case RxCheck::kDestMac:
    case RxCheck::kDestIp:
    case RxCheck::kDestPort:
      return RxVerdict::kNotForUs;
    case RxCheck::kUnknownSource:
      return RxVerdict::kUnknownSource;
    case RxCheck::kTruncatedEthernet:
    case RxCheck::kNotIpv4:
    case RxCheck::kBadIpHeader:
    case RxCheck::kBadIpChecksum:
    case RxCheck::kIpTotalLength:
    case RxCheck::kFragment:
    case RxCheck::kNotUdp:
    case RxCheck::kBadUdpLength:
      return RxVerdict::kMalformed;
  }
  return RxVerdict::kMalformed;
}

const char* RxCheckName(RxCheck check) {
  switch (check) {
    case RxCheck::kOk:
      return "ok";
    case RxCheck::kTruncatedEthernet:
      return "truncated Ethernet header";
    case RxCheck::kDestMac:
      return "destination MAC not ours";
    case RxCheck::kNotIpv4:
      return "not IPv4";
    case RxCheck::kBadIpHeader:
      return "bad IPv4 header";
    case RxCheck::kBadIpChecksum:
      return "bad IPv4 header checksum";
    case RxCheck::kIpTotalLength:
      return "IPv4 total length does not match the frame";
    case RxCheck::kFragment:
      return "IPv4 fragment";
    case RxCheck::kNotUdp:
      return "not UDP";
    case RxCheck::kDestIp:
      return "destination IPv4 not ours";
    case RxCheck::kBadUdpLength:
      return "UDP length does not match IPv4 length";
    case RxCheck::kDestPort:
      return "other UDP port";
    case RxCheck::kUnknownSource:
      return "source IPv4 not a peer";
  }
  return "?";
}

RxFrame ParseAndCount(std::span<const uint8_t> frame, const HostTable& hosts, uint16_t udp_port,
                      TransportStats* stats) {
  const RxFrame f = ParseFrame(frame, hosts, udp_port);
  switch (VerdictOf(f.check)) {
    case RxVerdict::kAccept:
      ++stats->rx_frames;
      stats->rx_bytes += frame.size();
      break;
    case RxVerdict::kMalformed:
      ++stats->rx_dropped_malformed;
      break;
    case RxVerdict::kNotForUs:
      ++stats->rx_dropped_not_for_us;
      break;
    case RxVerdict::kUnknownSource:
      ++stats->rx_dropped_unknown_source;
      break;
  }
  return f;
}

}  // namespace dsm::net
