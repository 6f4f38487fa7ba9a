#include "tests/multihost/pcap_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace dsm::testing {
namespace {

constexpr uint32_t kMagicMicro = 0xa1b2c3d4;
constexpr uint32_t kMagicNano = 0xa1b23c4d;
constexpr size_t kGlobalHeaderBytes = 24;
constexpr size_t kRecordHeaderBytes = 16;
constexpr size_t kEthernetBytes = 14;
constexpr size_t kIpv4Bytes = 20;
constexpr size_t kUdpBytes = 8;
constexpr size_t kMinEthernetFrame = 60;  // without FCS
constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint8_t kProtoUdp = 17;

// pcap headers are in the writer's byte order; frames are big-endian on the wire.
template <typename T>
void PutNative(std::vector<uint8_t>* out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->insert(out->end(), b, b + sizeof(T));
}
template <typename T>
T GetNative(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
void PutBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void PutBe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

}  // namespace

bool WritePcap(const std::string& path, const std::vector<std::vector<uint8_t>>& frames,
               std::string* error) {
  std::vector<uint8_t> out;
  PutNative<uint32_t>(&out, kMagicMicro);
  PutNative<uint16_t>(&out, 2);  // version 2.4
  PutNative<uint16_t>(&out, 4);
  PutNative<int32_t>(&out, 0);       // thiszone
  PutNative<uint32_t>(&out, 0);      // sigfigs
  PutNative<uint32_t>(&out, 65535);  // snaplen
  PutNative<uint32_t>(&out, kLinktypeEthernet);
  uint32_t usec = 0;
  for (const auto& f : frames) {
    PutNative<uint32_t>(&out, 1);  // ts_sec
    PutNative<uint32_t>(&out, usec++);
    PutNative<uint32_t>(&out, static_cast<uint32_t>(f.size()));  // incl_len
    PutNative<uint32_t>(&out, static_cast<uint32_t>(f.size()));  // orig_len
    out.insert(out.end(), f.begin(), f.end());
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  file.close();
  if (!file) {
    *error = "cannot write " + path;
    return false;
  }
  return true;
}

PcapContents ReadPcap(const std::string& path) {
  PcapContents c;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    c.error = "cannot open " + path;
    return c;
  }
  const std::vector<uint8_t> d((std::istreambuf_iterator<char>(file)),
                               std::istreambuf_iterator<char>());
  if (d.size() < kGlobalHeaderBytes) {
    c.error = path + ": " + std::to_string(d.size()) + " bytes, shorter than a pcap header";
    return c;
  }
  const uint32_t magic = GetNative<uint32_t>(d.data());
  if (magic != kMagicMicro && magic != kMagicNano) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", magic);
    c.error = path + ": magic " + hex + " is not a classic pcap file in this byte order";
    return c;
  }
  c.nanosecond = magic == kMagicNano;
  c.snaplen = GetNative<uint32_t>(d.data() + 16);
  c.linktype = GetNative<uint32_t>(d.data() + 20);
  size_t at = kGlobalHeaderBytes;
  while (at < d.size()) {
    if (d.size() - at < kRecordHeaderBytes) break;
    const uint32_t incl = GetNative<uint32_t>(d.data() + at + 8);
    const uint32_t orig = GetNative<uint32_t>(d.data() + at + 12);
    if (d.size() - at - kRecordHeaderBytes < incl) break;
    const uint8_t* bytes = d.data() + at + kRecordHeaderBytes;
    c.frames.emplace_back(bytes, bytes + incl);
    if (incl < orig) ++c.cut_records;
    at += kRecordHeaderBytes + incl;
  }
  c.trailing_bytes = d.size() - at;
  c.ok = true;
  return c;
}

uint16_t InternetChecksum(std::span<const uint8_t> bytes) {
  uint32_t sum = 0;
  size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2) sum += Be16(bytes.data() + i);
  if (i < bytes.size()) sum += uint32_t{bytes[i]} << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

std::vector<uint8_t> BuildUdpFrame(const UdpEndpoint& src, const UdpEndpoint& dst,
                                   std::span<const uint8_t> payload) {
  const size_t ip_total = kIpv4Bytes + kUdpBytes + payload.size();
  std::vector<uint8_t> f(std::max(kEthernetBytes + ip_total, kMinEthernetFrame), 0);
  uint8_t* eth = f.data();
  std::memcpy(eth, dst.mac.data(), 6);
  std::memcpy(eth + 6, src.mac.data(), 6);
  PutBe16(eth + 12, kEtherTypeIpv4);
  uint8_t* ip = eth + kEthernetBytes;
  ip[0] = 0x45;  // version 4, IHL 5
  PutBe16(ip + 2, static_cast<uint16_t>(ip_total));
  PutBe16(ip + 6, 0x4000);  // DF, offset 0
  ip[8] = 64;
  ip[9] = kProtoUdp;
  PutBe32(ip + 12, src.ipv4);
  PutBe32(ip + 16, dst.ipv4);
  PutBe16(ip + 10, InternetChecksum({ip, kIpv4Bytes}));
  uint8_t* udp = ip + kIpv4Bytes;
  PutBe16(udp, src.port);
  PutBe16(udp + 2, dst.port);
  PutBe16(udp + 4, static_cast<uint16_t>(kUdpBytes + payload.size()));
  if (!payload.empty()) std::memcpy(udp + kUdpBytes, payload.data(), payload.size());
  return f;
}

ParsedUdpFrame ParseUdpFrame(std::span<const uint8_t> frame) {
  ParsedUdpFrame p;
  auto fail = [&](const std::string& why) {
    p.error = why;
    return p;
  };
  if (frame.size() < kEthernetBytes) return fail("shorter than an Ethernet header");
  const uint8_t* eth = frame.data();
  std::memcpy(p.dst.mac.data(), eth, 6);
  std::memcpy(p.src.mac.data(), eth + 6, 6);
  if (Be16(eth + 12) != kEtherTypeIpv4) return fail("ethertype is not IPv4");
  if (frame.size() < kEthernetBytes + kIpv4Bytes) return fail("truncated IPv4 header");
  const uint8_t* ip = eth + kEthernetBytes;
  if (ip[0] != 0x45) return fail("IPv4 version/IHL byte is not 0x45 (options or not IPv4)");
  if (InternetChecksum({ip, kIpv4Bytes}) != 0) return fail("bad IPv4 header checksum");
  const uint16_t total = Be16(ip + 2);
  if (total < kIpv4Bytes + kUdpBytes || kEthernetBytes + total > frame.size()) {
    return fail("IPv4 total length " + std::to_string(total) + " does not fit the frame of " +
                std::to_string(frame.size()) + " bytes");
  }
  // Only zero padding up to the Ethernet minimum may follow the datagram.
  if (kEthernetBytes + total < frame.size() && frame.size() > kMinEthernetFrame) {
    return fail("frame has " + std::to_string(frame.size() - kEthernetBytes - total) +
                " bytes after the IPv4 datagram");
  }
  const uint16_t frag = Be16(ip + 6);
  if ((frag & 0x3fff) != 0) return fail("fragmented (MF or offset set)");
  p.dont_fragment = (frag & 0x4000) != 0;
  p.ttl = ip[8];
  if (ip[9] != kProtoUdp) return fail("IPv4 protocol is not UDP");
  p.src.ipv4 = Be32(ip + 12);
  p.dst.ipv4 = Be32(ip + 16);
  const uint8_t* udp = ip + kIpv4Bytes;
  p.src.port = Be16(udp);
  p.dst.port = Be16(udp + 2);
  if (Be16(udp + 4) != total - kIpv4Bytes) {
    return fail("UDP length " + std::to_string(Be16(udp + 4)) + " != IPv4 payload " +
                std::to_string(total - kIpv4Bytes));
  }
  p.udp_checksum = Be16(udp + 6);
  p.payload =
      frame.subspan(kEthernetBytes + kIpv4Bytes + kUdpBytes, total - kIpv4Bytes - kUdpBytes);
  p.ok = true;
  return p;
}

std::string FormatMac(const Mac& mac) {
  char s[18];
  std::snprintf(s, sizeof(s), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                mac[4], mac[5]);
  return s;
}

std::string FormatIpv4(uint32_t ipv4) {
  return std::to_string(ipv4 >> 24) + "." + std::to_string((ipv4 >> 16) & 255) + "." +
         std::to_string((ipv4 >> 8) & 255) + "." + std::to_string(ipv4 & 255);
}

}  // namespace dsm::testing
