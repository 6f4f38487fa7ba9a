// Test helpers for packet captures: classic pcap files (what DPDK's net_pcap
// reads with rx_pcap= and writes with tx_pcap=) and Ethernet II + IPv4 + UDP
// framing, written independently of net/ so that a capture checks the
// transport's framing instead of repeating it.
#ifndef DSM_TESTS_MULTIHOST_PCAP_FILE_H_
#define DSM_TESTS_MULTIHOST_PCAP_FILE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dsm::testing {

inline constexpr uint32_t kLinktypeEthernet = 1;

// Writes `frames` as a classic pcap file: 24-byte global header (magic
// 0xa1b2c3d4, microsecond timestamps, version 2.4, LINKTYPE_ETHERNET), then a
// 16-byte record header and the bytes of each frame. False with `error` set on
// an I/O failure.
bool WritePcap(const std::string& path, const std::vector<std::vector<uint8_t>>& frames,
               std::string* error);

struct PcapContents {
  bool ok = false;
  std::string error;        // when !ok
  bool nanosecond = false;  // magic 0xa1b23c4d (net_pcap's tx files) rather than 0xa1b2c3d4
  uint32_t linktype = 0;
  uint32_t snaplen = 0;
  std::vector<std::vector<uint8_t>> frames;  // captured bytes of each record
  uint64_t cut_records = 0;                  // records whose captured length < original length
  size_t trailing_bytes = 0;  // an incomplete last record (a file still being written)
};

// Reads a classic pcap file in this machine's byte order (microsecond or
// nanosecond magic). A partial last record is not an error: it is counted in
// trailing_bytes, so that a file another process is still writing can be read.
PcapContents ReadPcap(const std::string& path);

using Mac = std::array<uint8_t, 6>;

struct UdpEndpoint {
  Mac mac{};
  uint32_t ipv4 = 0;  // host byte order
  uint16_t port = 0;
};

// The Internet checksum (RFC 1071) of `bytes`; 0 over a header that carries a
// correct checksum.
uint16_t InternetChecksum(std::span<const uint8_t> bytes);

// Ethernet II + IPv4 (no options, DF, TTL 64, header checksum) + UDP (checksum
// 0) around `payload`, zero-padded to the 60-byte Ethernet minimum.
std::vector<uint8_t> BuildUdpFrame(const UdpEndpoint& src, const UdpEndpoint& dst,
                                   std::span<const uint8_t> payload);

struct ParsedUdpFrame {
  bool ok = false;
  std::string error;  // the first check that failed
  UdpEndpoint src, dst;
  bool dont_fragment = false;
  uint8_t ttl = 0;
  uint16_t udp_checksum = 0;
  std::span<const uint8_t> payload;  // the UDP payload, a view into the frame
};

// Checks an Ethernet II / IPv4 / UDP frame strictly: ethertype, version, IHL 5,
// header checksum, total length within the frame (only Ethernet padding after
// it), no fragmentation, protocol UDP, UDP length equal to the IPv4 payload.
ParsedUdpFrame ParseUdpFrame(std::span<const uint8_t> frame);

std::string FormatMac(const Mac& mac);
std::string FormatIpv4(uint32_t ipv4);

}  // namespace dsm::testing

#endif  // DSM_TESTS_MULTIHOST_PCAP_FILE_H_
