// Framing round trips and every malformed-frame case, with the counter
// (verdict) each must land in.
#include "net/udp_framing.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "net/host_table.h"

namespace dsm::net {
namespace {

constexpr MacAddr kOurMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
constexpr MacAddr kPeerMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
constexpr MacAddr kOtherMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x09};
constexpr uint32_t kOurIp = 0xc6120001;    // 198.18.0.1
constexpr uint32_t kPeerIp = 0xc6120002;   // 198.18.0.2
constexpr uint32_t kOtherIp = 0xc6120009;  // 198.18.0.9
constexpr uint16_t kPort = 7400;
constexpr uint16_t kPeerHost = 2;
constexpr uint16_t kJoinedGroup = 0x0102;
constexpr uint16_t kOtherGroup = 0x0103;

HostTable Table() {
  std::string error;
  auto t =
      HostTable::Build(kOurMac, kOurIp, {{kPeerHost, kPeerMac, kPeerIp}}, {kJoinedGroup}, &error);
  EXPECT_TRUE(t.has_value()) << error;
  return *t;
}

// A frame from the peer to us with `payload` bytes 0, 1, 2, ...
std::vector<uint8_t> Frame(size_t payload, MacAddr dst_mac = kOurMac, uint32_t dst_ip = kOurIp,
                           uint32_t src_ip = kPeerIp) {
  std::vector<uint8_t> f(kFrameHeaderBytes + payload);
  WriteFrameHeaders(f.data(), {kPeerMac, dst_mac, src_ip, dst_ip, kPort, 77}, payload);
  for (size_t i = 0; i < payload; ++i) f[kFrameHeaderBytes + i] = static_cast<uint8_t>(i);
  return f;
}

uint8_t* Ip(std::vector<uint8_t>& f) { return f.data() + kEthernetHeaderBytes; }

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// Rewrites the IPv4 checksum after a test edited the header.
void Reseal(std::vector<uint8_t>& f) {
  uint8_t* ip = Ip(f);
  const size_t ihl = size_t{ip[0] & 0x0fu} * 4;
  Put16(ip + 10, 0);
  Put16(ip + 10, Ipv4HeaderChecksum(ip, std::min(ihl, f.size() - kEthernetHeaderBytes)));
}

RxFrame Parse(const std::vector<uint8_t>& f) { return ParseFrame(f, Table(), kPort); }

TEST(UdpFramingTest, RoundTrip) {
  for (size_t payload : {size_t{0}, size_t{1}, size_t{18}, size_t{1472}, size_t{8972}}) {
    const std::vector<uint8_t> f = Frame(payload);
    const RxFrame r = Parse(f);
    ASSERT_EQ(r.check, RxCheck::kOk) << RxCheckName(r.check) << " payload " << payload;
    EXPECT_EQ(r.source_host, kPeerHost);
    ASSERT_EQ(r.payload.size(), payload);
    for (size_t i = 0; i < payload; ++i) ASSERT_EQ(r.payload[i], static_cast<uint8_t>(i));
  }
}

TEST(UdpFramingTest, HeadersAreStandard) {
  std::vector<uint8_t> f = Frame(100);
  EXPECT_EQ(0, std::memcmp(f.data(), kOurMac.data(), 6));
  EXPECT_EQ(0, std::memcmp(f.data() + 6, kPeerMac.data(), 6));
  EXPECT_EQ(f[12], 0x08);
  EXPECT_EQ(f[13], 0x00);
  const uint8_t* ip = Ip(f);
  EXPECT_EQ(ip[0], 0x45);
  EXPECT_EQ(ip[2] << 8 | ip[3], 128);  // 20 + 8 + 100
  EXPECT_EQ(ip[9], 17);
  EXPECT_EQ(Ipv4HeaderChecksum(ip, 20), 0);
  const uint8_t* udp = ip + 20;
  EXPECT_EQ(udp[0] << 8 | udp[1], kPort);
  EXPECT_EQ(udp[2] << 8 | udp[3], kPort);
  EXPECT_EQ(udp[4] << 8 | udp[5], 108);
}

TEST(UdpFramingTest, KnownChecksum) {
  // The worked example of RFC 1071 style header checksums (Wikipedia's IPv4 header).
  const uint8_t header[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                              0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(Ipv4HeaderChecksum(header, 20), 0xb861);
}

TEST(UdpFramingTest, EthernetPaddingIsIgnored) {
  std::vector<uint8_t> f = Frame(4);
  f.resize(60, 0);  // minimum Ethernet frame
  const RxFrame r = Parse(f);
  ASSERT_EQ(r.check, RxCheck::kOk);
  EXPECT_EQ(r.payload.size(), 4u);
}

TEST(UdpFramingTest, TruncatedEthernetIsMalformed) {
  for (size_t n : {size_t{0}, size_t{6}, size_t{13}}) {
    std::vector<uint8_t> f = Frame(10);
    f.resize(n);
    EXPECT_EQ(Parse(f).check, RxCheck::kTruncatedEthernet);
  }
  EXPECT_EQ(VerdictOf(RxCheck::kTruncatedEthernet), RxVerdict::kMalformed);
}

TEST(UdpFramingTest, NonIpv4EthertypeIsMalformed) {
  for (uint16_t type : {uint16_t{0x0806}, uint16_t{0x86dd}, uint16_t{0x8100}}) {
    std::vector<uint8_t> f = Frame(10);
    Put16(f.data() + 12, type);
    EXPECT_EQ(Parse(f).check, RxCheck::kNotIpv4) << type;
  }
  EXPECT_EQ(VerdictOf(RxCheck::kNotIpv4), RxVerdict::kMalformed);
}

TEST(UdpFramingTest, BadIhlIsMalformed) {
  for (uint8_t ihl : {uint8_t{0}, uint8_t{4}, uint8_t{15}}) {
    std::vector<uint8_t> f = Frame(10);  // 20 + 8 + 10 bytes after Ethernet: IHL 15 overruns
    Ip(f)[0] = static_cast<uint8_t>(0x40 | ihl);
    EXPECT_EQ(Parse(f).check, RxCheck::kBadIpHeader) << int{ihl};
  }
  std::vector<uint8_t> v6 = Frame(10);
  Ip(v6)[0] = 0x65;
  EXPECT_EQ(Parse(v6).check, RxCheck::kBadIpHeader);
  std::vector<uint8_t> short_ip = Frame(0);
  short_ip.resize(kEthernetHeaderBytes + 19);
  EXPECT_EQ(Parse(short_ip).check, RxCheck::kBadIpHeader);
  EXPECT_EQ(VerdictOf(RxCheck::kBadIpHeader), RxVerdict::kMalformed);
}

TEST(UdpFramingTest, IpOptionsAreSkipped) {
  // IHL 6: four bytes of options (NOPs) between the IPv4 and UDP headers.
  std::vector<uint8_t> plain = Frame(10);
  std::vector<uint8_t> f(plain.begin(), plain.begin() + kEthernetHeaderBytes + 20);
  f.insert(f.end(), {1, 1, 1, 1});
  f.insert(f.end(), plain.begin() + kEthernetHeaderBytes + 20, plain.end());
  Ip(f)[0] = 0x46;
  Put16(Ip(f) + 2, 20 + 4 + 8 + 10);
  Reseal(f);
  const RxFrame r = Parse(f);
  ASSERT_EQ(r.check, RxCheck::kOk) << RxCheckName(r.check);
  EXPECT_EQ(r.payload.size(), 10u);
  EXPECT_EQ(r.payload[3], 3);
}

TEST(UdpFramingTest, BadChecksumIsMalformed) {
  std::vector<uint8_t> f = Frame(10);
  Ip(f)[8] ^= 1;  // TTL changed, checksum not updated
  EXPECT_EQ(Parse(f).check, RxCheck::kBadIpChecksum);
  EXPECT_EQ(VerdictOf(RxCheck::kBadIpChecksum), RxVerdict::kMalformed);
}

TEST(UdpFramingTest, IpTotalLengthBeyondFrameIsMalformed) {
  std::vector<uint8_t> f = Frame(100);
  f.resize(f.size() - 1);  // truncated on the way (a too-small RX slot does this)
  EXPECT_EQ(Parse(f).check, RxCheck::kIpTotalLength);
  std::vector<uint8_t> g = Frame(100);
  Put16(Ip(g) + 2, 20 + 8 + 101);
  Reseal(g);
  EXPECT_EQ(Parse(g).check, RxCheck::kIpTotalLength);
  std::vector<uint8_t> h = Frame(100);
  Put16(Ip(h) + 2, 20 + 7);  // no room for a UDP header
  Reseal(h);
  EXPECT_EQ(Parse(h).check, RxCheck::kIpTotalLength);
  EXPECT_EQ(VerdictOf(RxCheck::kIpTotalLength), RxVerdict::kMalformed);
}

TEST(UdpFramingTest, FragmentsAreMalformed) {
  for (uint16_t flags : {uint16_t{0x2000}, uint16_t{0x0001}, uint16_t{0x4010}}) {
    std::vector<uint8_t> f = Frame(10);
    Put16(Ip(f) + 6, flags);
    Reseal(f);
    EXPECT_EQ(Parse(f).check, RxCheck::kFragment) << flags;
  }
}

TEST(UdpFramingTest, NotUdpIsMalformed) {
  std::vector<uint8_t> f = Frame(10);
  Ip(f)[9] = 6;  // TCP
  Reseal(f);
  EXPECT_EQ(Parse(f).check, RxCheck::kNotUdp);
  EXPECT_EQ(VerdictOf(RxCheck::kNotUdp), RxVerdict::kMalformed);
}

TEST(UdpFramingTest, WrongUdpLengthIsMalformed) {
  for (uint16_t len : {uint16_t{0}, uint16_t{7}, uint16_t{17}, uint16_t{19}, uint16_t{1000}}) {
    std::vector<uint8_t> f = Frame(10);  // correct: 18
    Put16(Ip(f) + 20 + 4, len);
    EXPECT_EQ(Parse(f).check, RxCheck::kBadUdpLength) << len;
  }
  EXPECT_EQ(VerdictOf(RxCheck::kBadUdpLength), RxVerdict::kMalformed);
}

TEST(UdpFramingTest, WrongPortIsNotForUs) {
  std::vector<uint8_t> f = Frame(10);
  Put16(Ip(f) + 20 + 2, kPort + 1);
  EXPECT_EQ(Parse(f).check, RxCheck::kDestPort);
  EXPECT_EQ(VerdictOf(RxCheck::kDestPort), RxVerdict::kNotForUs);
  // The source port does not matter.
  std::vector<uint8_t> g = Frame(10);
  Put16(Ip(g) + 20, 5555);
  EXPECT_EQ(Parse(g).check, RxCheck::kOk);
}

TEST(UdpFramingTest, OtherMacOrIpIsNotForUs) {
  EXPECT_EQ(Parse(Frame(10, kOtherMac)).check, RxCheck::kDestMac);
  EXPECT_EQ(Parse(Frame(10, kOurMac, kOtherIp)).check, RxCheck::kDestIp);
  EXPECT_EQ(VerdictOf(RxCheck::kDestMac), RxVerdict::kNotForUs);
  EXPECT_EQ(VerdictOf(RxCheck::kDestIp), RxVerdict::kNotForUs);
  // A frame for another host is not ours even if it is also malformed.
  std::vector<uint8_t> f = Frame(10, kOtherMac);
  Put16(f.data() + 12, 0x0806);
  EXPECT_EQ(Parse(f).check, RxCheck::kDestMac);
}

TEST(UdpFramingTest, BroadcastMacIsAccepted) {
  EXPECT_EQ(Parse(Frame(10, kBroadcastMac)).check, RxCheck::kOk);
}

TEST(UdpFramingTest, UnknownSourceIsCounted) {
  const RxFrame r = Parse(Frame(10, kOurMac, kOurIp, kOtherIp));
  EXPECT_EQ(r.check, RxCheck::kUnknownSource);
  EXPECT_EQ(VerdictOf(r.check), RxVerdict::kUnknownSource);
}

TEST(UdpFramingTest, MulticastOnlyForJoinedGroups) {
  const RxFrame joined = Parse(Frame(10, GroupMac(kJoinedGroup), GroupIpv4(kJoinedGroup)));
  EXPECT_EQ(joined.check, RxCheck::kOk);
  EXPECT_EQ(joined.source_host, kPeerHost);
  EXPECT_EQ(Parse(Frame(10, GroupMac(kOtherGroup), GroupIpv4(kOtherGroup))).check,
            RxCheck::kDestMac);
  EXPECT_EQ(Parse(Frame(10, GroupMac(kJoinedGroup), GroupIpv4(kOtherGroup))).check,
            RxCheck::kDestIp);
  // Other multicast MACs (IPv6 33:33:.., other IPv4 groups) are not ours.
  EXPECT_EQ(Parse(Frame(10, {0x33, 0x33, 0, 0, 0, 1}, GroupIpv4(kJoinedGroup))).check,
            RxCheck::kDestMac);
  EXPECT_EQ(Parse(Frame(10, {0x01, 0x00, 0x5e, 0x00, 0x01, 0x02}, GroupIpv4(kJoinedGroup))).check,
            RxCheck::kDestMac);
}

TEST(UdpFramingTest, GroupMapping) {
  EXPECT_EQ(GroupIpv4(0x0102), 0xef4d0102u);  // 239.77.1.2
  EXPECT_EQ(GroupMac(0x0102), (MacAddr{0x01, 0x00, 0x5e, 0x4d, 0x01, 0x02}));
  EXPECT_EQ(FormatIpv4(GroupIpv4(0xffff)), "239.77.255.255");
  // The MAC is the standard mapping of the IP (low 23 bits under 01:00:5e).
  const uint32_t ip = GroupIpv4(0xabcd);
  const MacAddr mac = GroupMac(0xabcd);
  EXPECT_EQ(mac[3], (ip >> 16) & 0x7f);
  EXPECT_EQ(mac[4], (ip >> 8) & 0xff);
  EXPECT_EQ(mac[5], ip & 0xff);
}

TEST(HostTableTest, Resolves) {
  const HostTable t = Table();
  const auto peer = t.Resolve(Destination::Host(kPeerHost));
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->mac, kPeerMac);
  EXPECT_EQ(peer->ipv4, kPeerIp);
  EXPECT_FALSE(t.Resolve(Destination::Host(99)).has_value());
  const auto group = t.Resolve(Destination::Group(kOtherGroup));  // sending needs no join
  ASSERT_TRUE(group.has_value());
  EXPECT_EQ(group->mac, GroupMac(kOtherGroup));
  EXPECT_EQ(t.HostOfIpv4(kPeerIp), kPeerHost);
  EXPECT_FALSE(t.HostOfIpv4(kOtherIp).has_value());
}

TEST(HostTableTest, RejectsBadConfigurations) {
  std::string error;
  EXPECT_FALSE(HostTable::Build({}, kOurIp, {}, {}, &error));
  EXPECT_NE(error.find("unicast"), std::string::npos) << error;
  EXPECT_FALSE(HostTable::Build(GroupMac(1), kOurIp, {}, {}, &error));
  EXPECT_FALSE(HostTable::Build(kOurMac, 0, {}, {}, &error));
  EXPECT_FALSE(HostTable::Build(kOurMac, kOurIp, {{2, kPeerMac, kPeerIp}, {2, kOtherMac, kOtherIp}},
                                {}, &error));
  EXPECT_NE(error.find("twice"), std::string::npos) << error;
  EXPECT_FALSE(HostTable::Build(kOurMac, kOurIp, {{2, kPeerMac, kPeerIp}, {3, kOtherMac, kPeerIp}},
                                {}, &error));
  EXPECT_NE(error.find("share"), std::string::npos) << error;
  EXPECT_FALSE(HostTable::Build(kOurMac, kOurIp, {{2, kPeerMac, 0}}, {}, &error));
}

TEST(HostTableTest, ParsesAndFormatsAddresses) {
  EXPECT_EQ(ParseMac("02:00:00:00:00:01"), kOurMac);
  EXPECT_FALSE(ParseMac("02:00:00:00:00").has_value());
  EXPECT_FALSE(ParseMac("02:00:00:00:00:01:05").has_value());
  EXPECT_EQ(FormatMac(kOurMac), "02:00:00:00:00:01");
  EXPECT_EQ(ParseIpv4("198.18.0.1"), kOurIp);
  EXPECT_FALSE(ParseIpv4("198.18.0").has_value());
  EXPECT_EQ(FormatIpv4(kOurIp), "198.18.0.1");
}

}  // namespace
}  // namespace dsm::net
