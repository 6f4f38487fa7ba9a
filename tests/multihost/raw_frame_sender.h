// Crafted frames for the multi-host bad-input tests: complete Ethernet II +
// IPv4 + UDP frames whose UDP payload is a libdsm frame (coherence's
// wire::Header, sealed with wire::Seal so its checksum is valid unless a case
// breaks it on purpose), sent through an AF_PACKET raw socket bound to one
// interface. Used by raw_frame_tool (run inside a host namespace of the
// virtual cluster with scripts/cluster.sh exec).
//
// The outer headers follow docs/wire-format.md: no VLAN tag, IPv4 without
// options, DF set, a valid IP header checksum, UDP checksum 0.
#ifndef DSM_TESTS_MULTIHOST_RAW_FRAME_SENDER_H_
#define DSM_TESTS_MULTIHOST_RAW_FRAME_SENDER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace dsm::testing::rawframe {

using Mac = std::array<uint8_t, 6>;

// Addressing of the virtual cluster (scripts/cluster.sh): host H has MAC
// 02:00:c6:12:00:0H and IPv4 198.18.0.H; every daemon uses UDP port 7400.
inline constexpr uint16_t kClusterUdpPort = 7400;
Mac ClusterHostMac(int host);
uint32_t ClusterHostIpv4(int host);  // host byte order

std::optional<Mac> ParseMac(const std::string& text);
std::optional<uint32_t> ParseIpv4(const std::string& text);  // host byte order
std::string FormatMac(const Mac& mac);
std::string FormatIpv4(uint32_t ipv4);

struct Addresses {
  Mac src_mac{};
  Mac dst_mac{};
  uint32_t src_ipv4 = 0;  // host byte order
  uint32_t dst_ipv4 = 0;
  uint16_t dst_port = kClusterUdpPort;  // both UDP ports, as the daemons use
};

// One DATA frame with a single run: the fields a case may want to choose.
struct DataSpec {
  uint16_t source_host = 1;
  uint16_t dest_host = 2;
  uint32_t area_index = 0;
  uint32_t area_generation = 1;
  uint64_t version = 1;
  uint64_t base_version = 0;
  uint16_t flags = 0;  // wire::kFlag...
  uint32_t incarnation = 0;  // the sending daemon's: dsmctl hosts shows it
  uint32_t transfer_id = 1;
  uint32_t seq = 0;
  uint32_t frame_count = 1;
  uint32_t first_line = 0;
  uint32_t line_count = 1;
  uint8_t fill = 0xab;  // every byte of the carried lines
};

// What is done to the sealed DATA frame of a DataSpec.
enum class Mutation {
  kNone,          // a well-formed DATA frame (the daemon decides by its state)
  kTruncated,     // only the first 20 bytes: shorter than a header
  kOversized,     // 64 bytes appended after what payload_bytes says
  kBadChecksum,   // one bit of the line data flipped after sealing
  kBadMagic,      // magic 0x21444142 ("BAD!"), resealed
  kBadVersion,    // protocol_version + 1, resealed
};
// Names as on the command line: data, truncated, oversized, bad_checksum,
// bad_magic, bad_version.
std::optional<Mutation> ParseMutation(const std::string& name);
const char* MutationName(Mutation m);

// The UDP payload: a sealed DATA frame for `spec`, then `mutation` applied.
std::vector<uint8_t> BuildPayload(const DataSpec& spec, Mutation mutation);

// Ethernet + IPv4 + UDP around `payload` (at most 65535 - 28 bytes).
std::vector<uint8_t> BuildEthernetFrame(const Addresses& a, uint16_t ip_id,
                                        std::span<const uint8_t> payload);

// An AF_PACKET/SOCK_RAW socket bound to one interface, send only (protocol 0:
// it receives nothing, so it does not see the daemon's traffic).
class RawSender {
 public:
  RawSender() = default;
  ~RawSender();
  RawSender(const RawSender&) = delete;
  RawSender& operator=(const RawSender&) = delete;

  bool Open(const std::string& iface, std::string* error);
  // Sends one complete Ethernet frame; retries briefly on ENOBUFS/EAGAIN.
  bool Send(std::span<const uint8_t> frame, std::string* error);

 private:
  int fd_ = -1;
  int ifindex_ = 0;
};

}  // namespace dsm::testing::rawframe

#endif  // DSM_TESTS_MULTIHOST_RAW_FRAME_SENDER_H_
