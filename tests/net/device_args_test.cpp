// Device arguments: the sizes chosen per device and MTU, and every
// configuration that DPDK would accept and then silently mishandle.
#include "net/device_args.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "net/eal_runtime.h"

namespace dsm::net {
namespace {

constexpr uint32_t kPage = 4096;
constexpr uint32_t kRing = 4096;

DeviceSpec Build(const std::string& device, uint32_t mtu, uint32_t ring = kRing) {
  std::string error;
  std::optional<DeviceSpec> spec = BuildDeviceSpec(device, mtu, ring, &error, kPage);
  EXPECT_TRUE(spec.has_value()) << device << " mtu " << mtu << ": " << error;
  return spec.value_or(DeviceSpec{});
}

std::string Reject(const std::string& device, uint32_t mtu) {
  std::string error;
  std::optional<DeviceSpec> spec = BuildDeviceSpec(device, mtu, kRing, &error, kPage);
  EXPECT_FALSE(spec.has_value()) << device << " mtu " << mtu
                                 << " was accepted: " << (spec ? spec->devargs : "");
  EXPECT_FALSE(error.empty());
  return error;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

void ExpectAfPacketInvariants(const DeviceSpec& s) {
  EXPECT_EQ(s.framesz % 16, 0u);
  EXPECT_GE(s.framesz, s.max_frame_bytes + 66);
  EXPECT_EQ(s.blocksz % kPage, 0u);
  EXPECT_EQ(s.blocksz % s.framesz, 0u);
  EXPECT_EQ(s.framecnt % (s.blocksz / s.framesz), 0u);
  EXPECT_GE(s.framecnt, kRing);
  EXPECT_LE(s.rx_data_room_bytes, 65535u);
  EXPECT_GE(s.rx_data_room_bytes, s.framesz - 32 + kMbufHeadroomBytes);
  EXPECT_TRUE(s.mtu_from_devargs);
}

TEST(DeviceArgsTest, AfPacketMtu1500) {
  const DeviceSpec s = Build("net_af_packet0,iface=veth0", 1500);
  EXPECT_EQ(s.kind, DeviceKind::kAfPacket);
  EXPECT_EQ(s.name, "net_af_packet0");
  EXPECT_EQ(s.iface, "veth0");
  EXPECT_EQ(s.max_frame_bytes, 1514u);
  EXPECT_EQ(s.framesz, 1584u);    // 1514 + 66 rounded to 16
  EXPECT_EQ(s.blocksz, 405504u);  // lcm(1584, 4096): 256 slots per block
  EXPECT_EQ(s.framecnt, 21248u);  // 32 MiB of slots, in whole blocks
  EXPECT_EQ(s.rx_data_room_bytes, 1584u - 32 + 128);
  EXPECT_EQ(s.devargs,
            "net_af_packet0,iface=veth0,qpairs=1,framesz=1584,blocksz=405504,framecnt=21248");
  ExpectAfPacketInvariants(s);
}

TEST(DeviceArgsTest, AfPacketMtu9000) {
  const DeviceSpec s = Build("net_af_packet1,iface=veth1", 9000);
  EXPECT_EQ(s.framesz, 9088u);    // 9014 + 66 rounded to 16
  EXPECT_EQ(s.blocksz, 290816u);  // lcm(9088, 4096): 32 slots per block
  EXPECT_EQ(s.framecnt, 4096u);
  EXPECT_EQ(s.rx_data_room_bytes, 9184u);
  ExpectAfPacketInvariants(s);
}

TEST(DeviceArgsTest, AfPacketMtu16000) {
  const DeviceSpec s = Build("net_af_packet0,iface=veth0", 16000);
  // 16080 would need 4 MiB blocks (lcm with the page); 16128 = 63 * 256 needs 252 KiB.
  EXPECT_EQ(s.framesz, 16128u);
  EXPECT_EQ(s.blocksz, 258048u);
  EXPECT_EQ(s.framecnt, 4096u);
  ExpectAfPacketInvariants(s);
}

TEST(DeviceArgsTest, AfPacketEveryMtuIsConsistent) {
  for (uint32_t mtu = kMinMtuBytes; mtu <= 65344; mtu += 97) {
    SCOPED_TRACE(mtu);
    ExpectAfPacketInvariants(Build("net_af_packet0,iface=v", mtu));
    const DeviceSpec small = Build("net_af_packet0,iface=v", mtu, 100);
    EXPECT_GE(uint64_t{small.framecnt} * small.framesz, uint64_t{32} << 20) << "rings hold 32 MiB";
  }
  ExpectAfPacketInvariants(Build("net_af_packet0,iface=v", 65344));  // largest: frame 65358
  const std::string e = Reject("net_af_packet0,iface=v", 65345);
  EXPECT_TRUE(Contains(e, "65344")) << e;
}

TEST(DeviceArgsTest, AfPacketRingsHoldAtLeast32MiBInWholeBlocks) {
  // Asked for 100 slots: raised to 32 MiB of them, in blocks of 256.
  const DeviceSpec small = Build("net_af_packet0,iface=v", 1500, 100);
  EXPECT_EQ(small.framecnt, 21248u);
  EXPECT_GE(small.framecnt * small.framesz, 32u << 20);
  // Asked for more: as asked, in whole blocks.
  const DeviceSpec big = Build("net_af_packet0,iface=v", 1500, 30000);
  EXPECT_EQ(big.framecnt, 30208u);  // 118 blocks of 256
}

TEST(DeviceArgsTest, AfPacketKeepsValidUserSizes) {
  const DeviceSpec s = Build("net_af_packet0,iface=v,framesz=2048,blocksz=4096,framecnt=512", 1500);
  EXPECT_EQ(s.framesz, 2048u);
  EXPECT_EQ(s.blocksz, 4096u);
  EXPECT_EQ(s.framecnt, 512u);
  EXPECT_EQ(s.rx_data_room_bytes, 2048u - 32 + 128);
  EXPECT_EQ(s.devargs, "net_af_packet0,iface=v,framesz=2048,blocksz=4096,framecnt=512,qpairs=1");
  // Only framesz given: the block follows it.
  const DeviceSpec t = Build("net_af_packet0,iface=v,framesz=9216", 9000);
  EXPECT_EQ(t.blocksz, 36864u);  // lcm(9216, 4096)
}

TEST(DeviceArgsTest, AfPacketRejectsBadUserSizes) {
  // Slot too small for the frame: truncated or dropped without a counter.
  EXPECT_TRUE(Contains(Reject("net_af_packet0,iface=v,framesz=1568", 1500), "1584"));
  EXPECT_TRUE(Contains(Reject("net_af_packet0,iface=v,framesz=2048", 9000), "framesz=2048"));
  // Not a multiple of 16.
  Reject("net_af_packet0,iface=v,framesz=2050", 1500);
  // blocksz not an exact multiple of framesz: TX stalls after ~2049 frames.
  const std::string stall = Reject("net_af_packet0,iface=v,framesz=1584,blocksz=4096", 1500);
  EXPECT_TRUE(Contains(stall, "exact multiple")) << stall;
  EXPECT_TRUE(Contains(stall, "405504")) << stall;  // the suggestion
  // blocksz not a multiple of the page.
  Reject("net_af_packet0,iface=v,framesz=2048,blocksz=6144", 1500);
  // framecnt not a multiple of the slots per block (2 here).
  Reject("net_af_packet0,iface=v,framesz=2048,blocksz=4096,framecnt=101", 1500);
  Reject("net_af_packet0,iface=v,framecnt=0", 1500);
  // Not numbers.
  EXPECT_TRUE(Contains(Reject("net_af_packet0,iface=v,framesz=2k", 1500), "not a decimal"));
  Reject("net_af_packet0,iface=v,framesz=-2048", 1500);
  // One queue pair only, and an interface is needed.
  Reject("net_af_packet0,iface=v,qpairs=2", 1500);
  EXPECT_TRUE(Contains(Reject("net_af_packet0", 1500), "iface="));
  Reject("net_af_packet0,iface=", 1500);
}

TEST(DeviceArgsTest, MemifBufferHoldsTheLargestFrame) {
  const DeviceSpec s = Build("net_memif0,role=server,socket=/tmp/m.sock", 1500);
  EXPECT_EQ(s.kind, DeviceKind::kMemif);
  EXPECT_EQ(s.bsize, 2048u);
  EXPECT_EQ(s.rsize_log2, 12u);  // 4096 slots
  EXPECT_EQ(s.devargs,
            "net_memif0,role=server,socket=/tmp/m.sock,bsize=2048,rsize=12,socket-abstract=no");
  EXPECT_TRUE(s.memif_server);
  EXPECT_EQ(s.memif_socket_file, "/tmp/m.sock");
  EXPECT_FALSE(Build("net_memif0", 1500).memif_server);
  EXPECT_EQ(Build("net_memif0", 1500).memif_socket_file, "/run/memif.sock");
  EXPECT_EQ(Build("net_memif0,socket=m,socket-abstract=yes", 1500).memif_socket_file, "");
  EXPECT_EQ(Build("net_memif0", 9000).bsize, 9216u);
  EXPECT_EQ(Build("net_memif0", 16000).bsize, 16384u);
  EXPECT_GE(Build("net_memif0", 9000).rx_data_room_bytes, 9014u + kMbufHeadroomBytes);
  // Given values are kept when they are large enough.
  const DeviceSpec t = Build("net_memif0,bsize=9014,rsize=10,socket-abstract=yes", 9000);
  EXPECT_EQ(t.bsize, 9014u);
  EXPECT_EQ(t.rsize_log2, 10u);
  EXPECT_EQ(t.devargs, "net_memif0,bsize=9014,rsize=10,socket-abstract=yes");
}

TEST(DeviceArgsTest, MemifRejectsSplitFramesAndZeroCopy) {
  const std::string e = Reject("net_memif0,bsize=2048", 9000);
  EXPECT_TRUE(Contains(e, "9014")) << e;
  Reject("net_memif0,bsize=1500", 1500);
  Reject("net_memif0,rsize=15", 1500);
  Reject("net_memif0,zero-copy=yes", 1500);
}

TEST(DeviceArgsTest, TapHasNoJumboFrames) {
  const DeviceSpec s = Build("net_tap0,iface=dsmtap0", 1500);
  EXPECT_EQ(s.kind, DeviceKind::kTap);
  EXPECT_EQ(s.iface, "dsmtap0");
  EXPECT_EQ(s.devargs, "net_tap0,iface=dsmtap0");
  const std::string e = Reject("net_tap0,iface=dsmtap0", 9000);
  EXPECT_TRUE(Contains(e, "jumbo")) << e;
  EXPECT_TRUE(Contains(e, "1500")) << e;
}

TEST(DeviceArgsTest, AfXdpTakesOneQueueOfAnInterfaceAndNoJumboFrames) {
  const DeviceSpec s = Build("net_af_xdp0,iface=dsm0", 1500);
  EXPECT_EQ(s.kind, DeviceKind::kAfXdp);
  EXPECT_EQ(s.iface, "dsm0");
  EXPECT_EQ(s.devargs, "net_af_xdp0,iface=dsm0,start_queue=0,queue_count=1");
  EXPECT_EQ(Build("net_af_xdp0,iface=dsm0,start_queue=2,queue_count=1", 1500).devargs,
            "net_af_xdp0,iface=dsm0,start_queue=2,queue_count=1");
  const std::string jumbo = Reject("net_af_xdp0,iface=dsm0", 3000);
  EXPECT_TRUE(Contains(jumbo, "multi-buffer")) << jumbo;
  EXPECT_TRUE(Contains(jumbo, "1500")) << jumbo;
  EXPECT_TRUE(Contains(Reject("net_af_xdp0", 1500), "iface=")) << "no interface named";
}

TEST(DeviceArgsTest, OtherDevicesPassThrough) {
  const DeviceSpec ring = Build("net_ring0", 1500);
  EXPECT_EQ(ring.kind, DeviceKind::kRing);
  EXPECT_EQ(ring.devargs, "net_ring0");
  EXPECT_GE(ring.rx_data_room_bytes, 1514u + kMbufHeadroomBytes);
  const DeviceSpec pcap = Build("net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap", 9000);
  EXPECT_EQ(pcap.kind, DeviceKind::kPcap);
  EXPECT_GE(pcap.rx_data_room_bytes, 9014u + kMbufHeadroomBytes);
  const DeviceSpec pci = Build("01:00.0", 9000);
  EXPECT_EQ(pci.kind, DeviceKind::kPci);
  EXPECT_EQ(pci.name, "0000:01:00.0");
  EXPECT_FALSE(pci.mtu_from_devargs);
  EXPECT_EQ(Build("0000:3b:00.1,rxq_cqe_comp_en=0", 1500).name, "0000:3b:00.1");
}

TEST(DeviceArgsTest, CountsKeepTheirBytesAboveMtu9000) {
  const PortCounts counts{4096, 1024, 16383};
  const PortCounts floor{512, 128, 1216};
  // Up to MTU 9000 the counts are what they were chosen as.
  for (uint32_t mtu : {1500u, 9000u}) {
    const PortCounts c = CountsForMtu(counts, mtu, floor);
    EXPECT_EQ(c.rx_ring, 4096u) << mtu;
    EXPECT_EQ(c.tx_ring, 1024u) << mtu;
    EXPECT_EQ(c.mbufs, 16383u) << mtu;
  }
  // MTU 64000: the same bytes in larger frames, 64014 B each.
  const PortCounts big = CountsForMtu(counts, 64000, floor);
  EXPECT_EQ(big.rx_ring, 576u);  // 4096 * 9014 / 64014
  EXPECT_EQ(big.tx_ring, 144u);
  EXPECT_EQ(big.mbufs, 2306u);
  EXPECT_LE(uint64_t{big.mbufs} * 64014, uint64_t{16383} * 9014);
  // Never below the floor.
  const PortCounts small = CountsForMtu({600, 150, 1300}, 64000, floor);
  EXPECT_EQ(small.rx_ring, 512u);
  EXPECT_EQ(small.tx_ring, 128u);
  EXPECT_EQ(small.mbufs, 1216u);
}

TEST(DeviceArgsTest, AfPacketMtu64000) {
  const DeviceSpec s = Build("net_af_packet0,iface=veth0", 64000, 576);
  EXPECT_EQ(s.max_frame_bytes, 64014u);
  EXPECT_GE(s.framesz, 64014u + 66);
  EXPECT_EQ(s.framecnt % (s.blocksz / s.framesz), 0u);
  EXPECT_GE(s.framecnt, 576u);
  EXPECT_LE(uint64_t{s.framecnt} * s.framesz, uint64_t{40} << 20);  // the kernel ring stays ~36 MiB
  EXPECT_EQ(s.framesz % 16, 0u);
  EXPECT_EQ(s.blocksz % kPage, 0u);
  EXPECT_EQ(s.blocksz % s.framesz, 0u);
  EXPECT_LE(s.blocksz, 1u << 20);
  EXPECT_LE(s.rx_data_room_bytes, 65535u);
  EXPECT_GE(s.rx_data_room_bytes, s.framesz - 32 + kMbufHeadroomBytes);
}

TEST(DeviceArgsTest, RejectsMalformedDeviceStrings) {
  Reject("", 1500);
  Reject(",iface=v", 1500);
  Reject("net_af_packet0,,iface=v", 1500);
  EXPECT_TRUE(Contains(Reject("net_af_packet0,iface=a,iface=b", 1500), "twice"));
  Reject("net_ring0", 100);    // below the IPv4 minimum we accept
  Reject("net_ring0", 65394);  // beyond a 16-bit mbuf
}

TEST(DeviceArgsTest, PciAddresses) {
  EXPECT_TRUE(LooksLikePciAddress("0000:01:00.0"));
  EXPECT_TRUE(LooksLikePciAddress("01:00.7"));
  EXPECT_TRUE(LooksLikePciAddress("ffff:af:1f.3"));
  EXPECT_FALSE(LooksLikePciAddress("01:00.8"));
  EXPECT_FALSE(LooksLikePciAddress("net_ring0"));
  EXPECT_FALSE(LooksLikePciAddress("0000:01:00"));
  EXPECT_FALSE(LooksLikePciAddress("0000:01:00.00"));
}

TEST(EalArgsTest, DefaultsLeaveNothingBehind) {
  EalOptions o;
  o.file_prefix = "dsm-test";
  o.memory_mb = 300;
  o.cpus = {0, 1, 2, 5};
  const std::vector<std::string> a = BuildEalArgs(o);
  auto has = [&](const std::string& x) { return std::find(a.begin(), a.end(), x) != a.end(); };
  EXPECT_TRUE(has("--file-prefix=dsm-test"));
  EXPECT_TRUE(has("--no-pci"));
  EXPECT_TRUE(has("--no-shconf"));
  EXPECT_TRUE(has("--no-huge"));
  EXPECT_TRUE(has("300"));
  EXPECT_TRUE(has("--no-telemetry"));
  EXPECT_TRUE(has("--lcores=0@(0-2,5)"));
}

TEST(EalArgsTest, PciAndUserMemory) {
  EalOptions o;
  o.pci_device = "0000:01:00.0";
  o.extra_args = {"--socket-mem=1024", "-l", "3"};
  const std::vector<std::string> a = BuildEalArgs(o);
  auto has = [&](const std::string& x) { return std::find(a.begin(), a.end(), x) != a.end(); };
  EXPECT_FALSE(has("--no-pci"));
  EXPECT_TRUE(has("0000:01:00.0"));
  EXPECT_FALSE(has("--no-huge"));
  EXPECT_FALSE(has("--no-shconf"));
  EXPECT_EQ(a.back(), "3");
  for (const std::string& x : a) EXPECT_NE(x.rfind("--lcores", 0), 0u) << x;
  EXPECT_GT(EalMemoryMbFor(16383, 9184), 16383u * 9184 / (1 << 20));
}

TEST(EalArgsTest, UserSizeKeepsNoHugepages) {
  EalOptions o;
  o.memory_mb = 100;
  o.extra_args = {"-m", "2048"};
  const std::vector<std::string> a = BuildEalArgs(o);
  EXPECT_EQ(std::count(a.begin(), a.end(), "-m"), 1);
  EXPECT_EQ(std::count(a.begin(), a.end(), "100"), 0);
  EXPECT_EQ(std::count(a.begin(), a.end(), "--no-huge"), 1);
  EXPECT_EQ(std::count(a.begin(), a.end(), "--no-shconf"), 1);
}

}  // namespace
}  // namespace dsm::net
