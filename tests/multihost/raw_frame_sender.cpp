#include "tests/multihost/raw_frame_sender.h"

#include "net/udp_framing.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "coherence/constants.h"
#include "coherence/wire_format.h"

namespace dsm::testing::rawframe {
Mac ClusterHostMac(int host) {
  return {0x02, 0x00, 0xc6, 0x12, 0x00, static_cast<uint8_t>(host)};
}

uint32_t ClusterHostIpv4(int host) {
  return (198u << 24) | (18u << 16) | (0u << 8) | static_cast<uint32_t>(host & 0xff);
}

std::optional<Mac> ParseMac(const std::string& text) {
  Mac m{};
  unsigned v[6];
  char tail;
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &tail) != 6) {
    return std::nullopt;
  }
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 0xff) return std::nullopt;
    m[i] = static_cast<uint8_t>(v[i]);
  }
  return m;
}

std::optional<uint32_t> ParseIpv4(const std::string& text) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

std::string FormatMac(const Mac& m) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

std::string FormatIpv4(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xff) + "." +
         std::to_string((ip >> 8) & 0xff) + "." + std::to_string(ip & 0xff);
}

std::optional<Mutation> ParseMutation(const std::string& name) {
  for (Mutation m : {Mutation::kNone, Mutation::kTruncated, Mutation::kOversized,
                     Mutation::kBadChecksum, Mutation::kBadMagic, Mutation::kBadVersion}) {
    if (name == MutationName(m)) return m;
  }
  return std::nullopt;
}

const char* MutationName(Mutation m) {
  switch (m) {
    case Mutation::kNone: return "data";
    case Mutation::kTruncated: return "truncated";
    case Mutation::kOversized: return "oversized";
    case Mutation::kBadChecksum: return "bad_checksum";
    case Mutation::kBadMagic: return "bad_magic";
    case Mutation::kBadVersion: return "bad_version";
  }
  return "?";
}

std::vector<uint8_t> BuildPayload(const DataSpec& s, Mutation mutation) {
  wire::Header h{};
  h.magic = wire::kMagic;
  h.protocol_version = wire::kProtocolVersion;
  h.type = static_cast<uint8_t>(wire::FrameType::kData);
  h.source_host = s.source_host;
  h.dest_host = s.dest_host;
  h.run_count = 1;
  h.area_index = s.area_index;
  h.area_generation = s.area_generation;
  h.version = s.version;
  h.base_version = s.base_version;
  h.seq = s.seq;
  h.frame_count = s.frame_count;
  h.flags = s.flags;
  h.incarnation = s.incarnation;
  h.transfer_id = s.transfer_id;
  if (mutation == Mutation::kBadMagic) h.magic = 0x21444142;  // "BAD!"
  if (mutation == Mutation::kBadVersion) h.protocol_version = wire::kProtocolVersion + 1;

  const wire::Run run{s.first_line, s.line_count};
  const size_t payload_bytes = sizeof(run) + size_t{s.line_count} * kLineBytes;
  std::vector<uint8_t> out(sizeof(h) + payload_bytes);
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), &run, sizeof(run));
  std::memset(out.data() + sizeof(h) + sizeof(run), s.fill, payload_bytes - sizeof(run));
  wire::Seal(out.data(), static_cast<uint32_t>(payload_bytes));

  switch (mutation) {
    case Mutation::kNone:
    case Mutation::kBadMagic:
    case Mutation::kBadVersion:
      break;
    case Mutation::kTruncated:
      out.resize(20);
      break;
    case Mutation::kOversized:
      out.resize(out.size() + 64, 0x5a);
      break;
    case Mutation::kBadChecksum:
      out.back() ^= 0x01;
      break;
  }
  return out;
}

std::vector<uint8_t> BuildEthernetFrame(const Addresses& a, uint16_t ip_id,
                                        std::span<const uint8_t> payload) {
  // The daemons' own framing (net/udp_framing): only the libdsm payload is crafted.
  std::vector<uint8_t> f(net::kFrameHeaderBytes + payload.size());
  net::FrameHeaderFields fields{};
  fields.src_mac = a.src_mac;
  fields.dst_mac = a.dst_mac;
  fields.src_ipv4 = a.src_ipv4;
  fields.dst_ipv4 = a.dst_ipv4;
  fields.udp_port = a.dst_port;
  fields.ip_id = ip_id;
  net::WriteFrameHeaders(f.data(), fields, payload.size());
  if (!payload.empty()) std::memcpy(f.data() + net::kFrameHeaderBytes, payload.data(), payload.size());
  return f;
}

RawSender::~RawSender() {
  if (fd_ >= 0) close(fd_);
}

bool RawSender::Open(const std::string& iface, std::string* error) {
  ifindex_ = static_cast<int>(if_nametoindex(iface.c_str()));
  if (ifindex_ == 0) {
    *error = "no interface '" + iface + "' here (" + std::strerror(errno) + ")";
    return false;
  }
  fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    *error = std::string("socket(AF_PACKET, SOCK_RAW): ") + std::strerror(errno) +
             " (needs CAP_NET_RAW)";
    return false;
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = 0;  // send only
  sll.sll_ifindex = ifindex_;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0) {
    *error = "bind to '" + iface + "': " + std::strerror(errno);
    return false;
  }
  return true;
}

bool RawSender::Send(std::span<const uint8_t> frame, std::string* error) {
  if (frame.size() < net::kEthernetHeaderBytes) {
    *error = "frame shorter than an Ethernet header";
    return false;
  }
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_protocol = htons(ETH_P_IP);
  to.sll_ifindex = ifindex_;
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, frame.data(), 6);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const ssize_t n = sendto(fd_, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to),
                             sizeof(to));
    if (n == static_cast<ssize_t>(frame.size())) return true;
    if (n < 0 && (errno == ENOBUFS || errno == EAGAIN || errno == EINTR)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      continue;
    }
    *error = n < 0 ? std::string("sendto: ") + std::strerror(errno)
                   : "sendto: short write of " + std::to_string(n) + " bytes";
    return false;
  }
  *error = "sendto: no buffer space for 100 ms";
  return false;
}

}  // namespace dsm::testing::rawframe
