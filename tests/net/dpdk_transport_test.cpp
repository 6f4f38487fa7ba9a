// The DPDK transport end to end, in one process (DPDK's EAL starts once per
// process): net_ring (its TX feeds its own RX; no privileges needed) and
// net_af_packet on a veth pair inside a private network namespace (root).
// Every payload carries a sequence number and an XXH3 checksum.
#include "net/dpdk_transport.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "net/link_mesh_transport.h"
#include "net/transport.h"
#include "net/udp_framing.h"
#include "tests/net/checked_payload.h"

namespace dsm::net {
namespace {

using Clock = std::chrono::steady_clock;

constexpr MacAddr kMacA = {0x02, 0x64, 0x73, 0x6d, 0x00, 0x01};
constexpr MacAddr kMacB = {0x02, 0x64, 0x73, 0x6d, 0x00, 0x02};
constexpr uint32_t kIpA = 0xc6120101;  // 198.18.1.1 (benchmarking range, RFC 2544)
constexpr uint32_t kIpB = 0xc6120102;  // 198.18.1.2
constexpr uint16_t kHostA = 1;
constexpr uint16_t kHostB = 2;
constexpr uint16_t kGroup = 0x0203;

PortConfig Config(const std::string& device, uint16_t host, const MacAddr& mac, uint32_t ip,
                  uint32_t mtu = 1500) {
  PortConfig c;
  c.device = device;
  c.file_prefix = "dsm-net-test-" + std::to_string(getpid());
  // Room for several ports (the EAL is sized once, by its first user).
  c.extra_eal_args = {"-m", "1536"};
  c.host_id = host;
  c.mac = mac;
  c.ipv4 = ip;
  c.mtu_bytes = mtu;
  c.rx_ring = 4096;
  c.tx_ring = 1024;
  c.mbufs = 8191;
  c.peers = {{kHostA, kMacA, kIpA}, {kHostB, kMacB, kIpB}};
  c.groups = {kGroup};
  return c;
}

std::unique_ptr<Transport> Open(const PortConfig& c) {
  std::string error;
  std::unique_ptr<Transport> t = OpenDpdkTransport(c, &error);
  EXPECT_NE(t, nullptr) << error;
  return t;
}

size_t Send(Transport& t, Destination to, size_t bytes, uint32_t first, uint32_t count) {
  size_t sent = 0;
  for (uint32_t s = first; s < first + count; ++s) {
    uint8_t* p = t.Reserve(to);
    if (p == nullptr) continue;
    Fill(p, bytes, s);
    t.Commit(bytes);
  }
  sent += t.Flush();
  return sent;
}

// Frames whose payload is a head written into the frame and a tail left
// where it is: the payloads are built whole in `source` (one per frame,
// `bytes` each) and all but their first kHeadBytes are offered by reference.
constexpr size_t kHeadBytes = 64;
void SendWithTails(Transport& t, Destination to, std::vector<std::vector<uint8_t>>& source,
                   size_t bytes, uint32_t first, TailHold* hold) {
  for (uint32_t i = 0; i < source.size(); ++i) {
    source[i].resize(bytes);
    Fill(source[i].data(), bytes, first + i);
    uint8_t* p = t.Reserve(to);
    ASSERT_NE(p, nullptr);
    std::memcpy(p, source[i].data(), kHeadBytes);
    t.CommitWithTail(p, kHeadBytes, {source[i].data() + kHeadBytes, bytes - kHeadBytes}, hold);
  }
}

// Overwrites every source payload: frames that still read from it would fail Check.
void Scribble(std::vector<std::vector<uint8_t>>& source) {
  for (auto& s : source) std::fill(s.begin(), s.end(), 0xee);
}

struct Received {
  std::vector<uint32_t> seqs;
  size_t bad = 0;
  std::vector<uint16_t> sources;
};

// Polls until `count` frames arrived or `timeout` passed; with `flush`, also
// flushes between polls (frames a full device kept queued go out as it drains).
Received Receive(Transport& t, size_t count,
                 std::chrono::milliseconds timeout = std::chrono::seconds(5), bool flush = false) {
  Received r;
  const auto deadline = Clock::now() + timeout;
  while (r.seqs.size() + r.bad < count && Clock::now() < deadline) {
    const size_t n = t.Poll(64, [&](std::span<const uint8_t> payload, uint16_t source) {
      uint32_t seq = 0;
      if (Check(payload, &seq)) {
        r.seqs.push_back(seq);
        r.sources.push_back(source);
      } else {
        ++r.bad;
      }
    });
    if (flush) t.Flush();
    if (n == 0) t.WaitForFrames(50);
  }
  return r;
}

void ExpectInOrder(const Received& r, uint32_t first, uint32_t count, uint16_t source) {
  ASSERT_EQ(r.bad, 0u);
  ASSERT_EQ(r.seqs.size(), count);
  for (uint32_t i = 0; i < count; ++i) {
    ASSERT_EQ(r.seqs[i], first + i);
    ASSERT_EQ(r.sources[i], source);
  }
}

// ---- net_ring: no privileges, TX loops back to RX ----------------------------

TEST(DpdkRingTest, LoopbackUnicastAndMulticast) {
  auto t = Open(Config("net_ring0", kHostA, kMacA, kIpA));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->max_payload_bytes(), 1500u - 28);
  // Unicast to ourselves (we are our own peer here), in batches the ring holds.
  for (uint32_t batch = 0; batch < 8; ++batch) {
    EXPECT_EQ(Send(*t, Destination::Host(kHostA), t->max_payload_bytes(), batch * 256, 256), 256u);
    ExpectInOrder(Receive(*t, 256), batch * 256, 256, kHostA);
  }
  // A joined group is delivered; another group is not for us.
  EXPECT_EQ(Send(*t, Destination::Group(kGroup), 100, 5000, 10), 10u);
  ExpectInOrder(Receive(*t, 10), 5000, 10, kHostA);
  EXPECT_EQ(Send(*t, Destination::Group(kGroup + 1), 100, 6000, 3), 3u);
  EXPECT_EQ(Receive(*t, 1, std::chrono::milliseconds(200)).seqs.size(), 0u);
  // Unicast to host B (not us) leaves with B's addresses: not for us either.
  EXPECT_EQ(Send(*t, Destination::Host(kHostB), 100, 7000, 2), 2u);
  EXPECT_EQ(Receive(*t, 1, std::chrono::milliseconds(200)).seqs.size(), 0u);
  // Small payloads are padded to the Ethernet minimum and still exact.
  EXPECT_EQ(Send(*t, Destination::Host(kHostA), 16, 8000, 1), 1u);
  ExpectInOrder(Receive(*t, 1), 8000, 1, kHostA);

  const TransportStats s = t->stats();
  EXPECT_EQ(s.tx_frames, 8u * 256 + 10 + 3 + 2 + 1);
  EXPECT_EQ(s.rx_frames, 8u * 256 + 10 + 1);
  EXPECT_EQ(s.rx_dropped_not_for_us, 5u);
  EXPECT_EQ(s.rx_dropped_malformed, 0u);
  EXPECT_EQ(s.tx_dropped, 0u);
  EXPECT_EQ(s.tx_bytes, s.rx_bytes + 3 * (42 + 100) + 2 * (42 + 100));
}

TEST(DpdkRingTest, AFullDeviceKeepsFramesQueuedInOrderInsteadOfDroppingThem) {
  // Nobody drains the loopback ring while we send: it fills, and what it
  // refuses waits in the transport. Once we receive, later Flushes send the
  // rest, in order, none lost.
  PortConfig c = Config("net_ring0", kHostA, kMacA, kIpA);
  c.tx_stall_us = 60'000'000;  // however slow this machine is, never a stall here
  auto t = Open(c);
  ASSERT_NE(t, nullptr);
  constexpr uint32_t kFrames = 1500;  // more than the ring holds, fewer than the backlog limit
  uint32_t seq = 0;
  size_t most_queued = 0;
  while (seq < kFrames) {
    for (int i = 0; i < 100 && seq < kFrames; ++i, ++seq) {
      uint8_t* p = t->Reserve(Destination::Host(kHostA));
      ASSERT_NE(p, nullptr);
      Fill(p, 200, seq);
      t->Commit(200);
    }
    t->Flush();
    most_queued = std::max(most_queued, t->tx_backlog());
  }
  EXPECT_GT(most_queued, 0u) << "the ring never filled: the test sends too little";
  EXPECT_EQ(t->stats().tx_dropped, 0u);
  const Received r = Receive(*t, kFrames, std::chrono::seconds(10), /*flush=*/true);
  ExpectInOrder(r, 0, kFrames, kHostA);
  EXPECT_EQ(t->tx_backlog(), 0u);
  EXPECT_EQ(t->stats().tx_frames, kFrames);
  EXPECT_EQ(t->stats().tx_dropped, 0u);
}

TEST(DpdkRingTest, UrgentFramesGoAheadOfTheQueuedOnesInTheirOwnOrder) {
  // The ring fills and 1,000 frames or so wait in the transport; two urgent
  // frames committed then leave before those (after what the ring holds).
  PortConfig c = Config("net_ring0", kHostA, kMacA, kIpA);
  c.tx_stall_us = 60'000'000;
  auto t = Open(c);
  ASSERT_NE(t, nullptr);
  constexpr uint32_t kFrames = 1500;
  for (uint32_t seq = 0; seq < kFrames; ++seq) {
    uint8_t* p = t->Reserve(Destination::Host(kHostA));
    ASSERT_NE(p, nullptr);
    Fill(p, 200, seq);
    t->Commit(200);
    if (seq % 100 == 99) t->Flush();
  }
  const size_t queued = t->tx_backlog();
  ASSERT_GT(queued, 2u) << "the ring never filled: the test sends too little";
  for (uint32_t seq = kFrames; seq < kFrames + 2; ++seq) {
    uint8_t* p = t->Reserve(Destination::Host(kHostA).Urgent());
    ASSERT_NE(p, nullptr);
    Fill(p, 200, seq);
    t->Commit(200);
  }
  const Received r = Receive(*t, kFrames + 2, std::chrono::seconds(10), /*flush=*/true);
  ASSERT_EQ(r.bad, 0u);
  ASSERT_EQ(r.seqs.size(), kFrames + 2);
  const size_t in_ring = kFrames - queued;  // sent before the urgent ones were committed
  for (size_t i = 0; i < r.seqs.size(); ++i) {
    const uint32_t want = i < in_ring       ? static_cast<uint32_t>(i)
                          : i < in_ring + 2 ? kFrames + static_cast<uint32_t>(i - in_ring)
                                            : static_cast<uint32_t>(i - 2);
    ASSERT_EQ(r.seqs[i], want) << "position " << i;
  }
  EXPECT_EQ(t->stats().tx_dropped, 0u);
}

TEST(DpdkRingTest, ADeviceNobodyDrainsHasItsBacklogDroppedAfterTheStallTime) {
  // A peer that is gone never drains its ring: after tx_stall_us without the
  // device taking a frame, what waits is dropped and counted, as on a lossy link.
  PortConfig c = Config("net_ring0", kHostA, kMacA, kIpA);
  c.tx_stall_us = 1000;
  auto t = Open(c);
  ASSERT_NE(t, nullptr);
  uint32_t seq = 0;
  for (int round = 0; round < 20 && t->tx_backlog() == 0; ++round) {
    for (int i = 0; i < 100; ++i, ++seq) {
      uint8_t* p = t->Reserve(Destination::Host(kHostA));
      ASSERT_NE(p, nullptr);
      Fill(p, 200, seq);
      t->Commit(200);
    }
    t->Flush();
  }
  ASSERT_GT(t->tx_backlog(), 0u) << "the ring never filled";
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  t->Flush();
  EXPECT_EQ(t->tx_backlog(), 0u);
  const uint64_t dropped = t->stats().tx_dropped;
  EXPECT_GT(dropped, 0u);
  // What the ring took arrives, in order; the dropped frames never do.
  const Received r = Receive(*t, seq, std::chrono::milliseconds(500));
  EXPECT_EQ(r.seqs.size() + dropped, seq);
  ExpectInOrder(r, 0, static_cast<uint32_t>(r.seqs.size()), kHostA);
}

TEST(DpdkRingTest, TailsAreCopiedBecauseTheRingHandsMbufsOnWhole) {
  auto t = Open(Config("net_ring0", kHostA, kMacA, kIpA));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->NewTailHold(), nullptr);
  std::vector<std::vector<uint8_t>> source(50);
  SendWithTails(*t, Destination::Host(kHostA), source, t->max_payload_bytes(), 0, nullptr);
  EXPECT_EQ(t->Flush(), 50u);
  Scribble(source);  // copied at Commit: what was sent does not change
  ExpectInOrder(Receive(*t, 50), 0, 50, kHostA);
  EXPECT_EQ(t->stats().tx_tail_frames, 0u);
}

TEST(DpdkRingTest, CallerMistakesAreCountedNotSent) {
  auto t = Open(Config("net_ring0", kHostA, kMacA, kIpA));
  ASSERT_NE(t, nullptr);
  t->Reserve(Destination::Host(99));  // unknown peer
  t->Commit(10);
  t->Reserve(Destination::Host(kHostA));
  t->Commit(t->max_payload_bytes() + 1);  // oversized
  t->Commit(10);                          // nothing reserved
  EXPECT_EQ(t->Flush(), 0u);
  EXPECT_EQ(t->stats().tx_dropped, 2u);
  EXPECT_EQ(t->stats().tx_frames, 0u);
  // A Reserve without Commit is abandoned by the next Reserve.
  t->Reserve(Destination::Host(kHostA));
  uint8_t* p = t->Reserve(Destination::Host(kHostA));
  Fill(p, 64, 1);
  t->Commit(64);
  EXPECT_EQ(t->Flush(), 1u);
  ExpectInOrder(Receive(*t, 1), 1, 1, kHostA);
}

TEST(DpdkRingTest, ReopenTheSameDeviceAndRejectASecondOpen) {
  for (int i = 0; i < 3; ++i) {
    auto t = Open(Config("net_ring1", kHostA, kMacA, kIpA));
    ASSERT_NE(t, nullptr);
    std::string error;
    EXPECT_EQ(OpenDpdkTransport(Config("net_ring1", kHostA, kMacA, kIpA), &error), nullptr);
    EXPECT_NE(error.find("already open"), std::string::npos) << error;
    EXPECT_EQ(Send(*t, Destination::Host(kHostA), 200, 0, 5), 5u);
    ExpectInOrder(Receive(*t, 5), 0, 5, kHostA);
  }
}

TEST(DpdkRingTest, FaultsOverTheRealTransport) {
  auto inner = Open(Config("net_ring0", kHostA, kMacA, kIpA));
  ASSERT_NE(inner, nullptr);
  auto t = WithFaults(std::move(inner),
                      {.drop = 0.2, .duplicate = 0, .reorder = 0, .corrupt = 0.1, .seed = 11});
  uint32_t sent = 0;
  Received all;
  for (int batch = 0; batch < 10; ++batch) {
    Send(*t, Destination::Host(kHostA), 500, sent, 100);
    sent += 100;
    const TransportStats s = t->stats();
    Received r = Receive(*t, s.tx_frames - (all.seqs.size() + all.bad));
    all.seqs.insert(all.seqs.end(), r.seqs.begin(), r.seqs.end());
    all.bad += r.bad;
  }
  const TransportStats s = t->stats();
  EXPECT_EQ(s.faults_dropped + s.tx_frames, 1000u);
  EXPECT_EQ(all.bad, s.faults_corrupted);  // every corruption caught by the checksum
  EXPECT_EQ(all.seqs.size() + all.bad, s.tx_frames);
  EXPECT_GT(s.faults_dropped, 100u);
  EXPECT_LT(s.faults_dropped, 300u);
}

TEST(DpdkRingTest, PacingSpacesFrames) {
  PortConfig c = Config("net_ring0", kHostA, kMacA, kIpA);
  c.pace_bits_per_sec = 100'000'000;  // 100 Mbit/s
  auto t = Open(c);
  ASSERT_NE(t, nullptr);
  constexpr uint32_t kFrames = 400;
  const size_t payload = t->max_payload_bytes();
  const auto start = Clock::now();
  for (uint32_t b = 0; b < kFrames / 200; ++b) {
    EXPECT_EQ(Send(*t, Destination::Host(kHostA), payload, b * 200, 200), 200u);
    ExpectInOrder(Receive(*t, 200), b * 200, 200, kHostA);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // 400 frames of 1514 + 24 bytes at 100 Mbit/s take 49 ms, less the 64 KiB burst.
  const double bits = kFrames * (1514.0 + 24) * 8 - 64 * 1024 * 8;
  EXPECT_GE(seconds, 0.9 * bits / 100e6) << "the pacer let frames through too fast";
}

TEST(DpdkRingTest, ConfigurationErrorsSayWhatToFix) {
  std::string error;
  EXPECT_EQ(OpenDpdkTransport(Config("net_tap0,iface=dsmtap9", kHostA, kMacA, kIpA, 9000), &error),
            nullptr);
  EXPECT_NE(error.find("jumbo"), std::string::npos) << error;
  EXPECT_EQ(OpenDpdkTransport(Config("net_nosuchdriver0", kHostA, kMacA, kIpA), &error), nullptr);
  EXPECT_NE(error.find("could not probe"), std::string::npos) << error;
  EXPECT_EQ(
      OpenDpdkTransport(Config("net_af_packet7,iface=dsm-no-such", kHostA, kMacA, kIpA), &error),
      nullptr);
  EXPECT_NE(error.find("dsm-no-such"), std::string::npos) << error;
  PortConfig dup = Config("net_ring0", kHostA, kMacA, kIpA);
  dup.peers.push_back({3, kMacB, kIpB});
  EXPECT_EQ(OpenDpdkTransport(dup, &error), nullptr);
  EXPECT_NE(error.find("share"), std::string::npos) << error;
  PortConfig few = Config("net_ring0", kHostA, kMacA, kIpA);
  few.mbufs = 1000;
  EXPECT_EQ(OpenDpdkTransport(few, &error), nullptr);
  EXPECT_NE(error.find("mbufs"), std::string::npos) << error;
}

// ---- net_memif: a server and a client port in this process --------------------

// Sends one frame at a time until one arrives: memif connects asynchronously.
bool WaitUntilConnected(Transport& from, Transport& to, uint16_t to_host) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    Send(from, Destination::Host(to_host), 64, 999999, 1);
    if (!Receive(to, 1, std::chrono::milliseconds(20)).seqs.empty()) return true;
  }
  return false;
}

TEST(DpdkMemifTest, ServerAndClientExchangeJumboFrames) {
  const std::string socket = "/tmp/dsm-net-test-" + std::to_string(getpid()) + ".sock";
  {
    // A socket file left by a server that died (bound, never listening).
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    close(fd);
  }
  auto a = Open(Config("net_memif0,role=server,socket=" + socket, kHostA, kMacA, kIpA, 9000));
  auto b = Open(Config("net_memif1,role=client,socket=" + socket, kHostB, kMacB, kIpB, 9000));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(WaitUntilConnected(*a, *b, kHostB)) << "memif did not connect within 10 s";
  for (uint32_t done = 0; done < 4000; done += 500) {
    EXPECT_EQ(Send(*a, Destination::Host(kHostB), 8972, done, 500), 500u);
    ExpectInOrder(Receive(*b, 500), done, 500, kHostA);
  }
  // memif copies frames into its shared ring as it sends them: tails too.
  std::unique_ptr<TailHold> hold = a->NewTailHold();
  ASSERT_NE(hold, nullptr);
  std::vector<std::vector<uint8_t>> source(400);
  SendWithTails(*a, Destination::Host(kHostB), source, 8972, 10000, hold.get());
  EXPECT_EQ(a->Flush(), 400u);
  EXPECT_EQ(hold->frames_in_use(), 0u);
  Scribble(source);
  const Received tails = Receive(*b, 400);
  EXPECT_EQ(hold->frames_in_use(), 0u);
  ExpectInOrder(tails, 10000, 400, kHostA);
  EXPECT_EQ(a->stats().tx_tail_frames, 400u);
  ASSERT_TRUE(WaitUntilConnected(*b, *a, kHostA));
  EXPECT_EQ(Send(*b, Destination::Host(kHostA), 1000, 0, 100), 100u);
  ExpectInOrder(Receive(*a, 100), 0, 100, kHostB);
  // An idle wait returns after about its timeout, interrupts or not.
  const auto start = Clock::now();
  b->WaitForFrames(20'000);
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(waited, 0.015);
  EXPECT_LT(waited, 1.0);
  a.reset();
  b.reset();
  EXPECT_NE(access(socket.c_str(), F_OK), 0) << "the memif server left its socket behind";
}

// Whether `fd` polls readable within `timeout_ms`.
bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

TEST(DpdkMemifTest, AMeshRingsItsPeerForFramesItWaitsForNotForLazyOnes) {
  char dir_template[] = "/tmp/dsm-mesh-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string socket = dir + "/link-1-2.sock";
  std::string error;
  PortConfig ca = Config("", kHostA, kMacA, kIpA, 9000);
  PortConfig cb = Config("", kHostB, kMacB, kIpB, 9000);
  auto a = OpenLinkMeshTransport(ca, {{kHostB, "net_memif2,role=server,socket=" + socket}}, &error);
  ASSERT_NE(a, nullptr) << error;
  auto b = OpenLinkMeshTransport(cb, {{kHostA, "net_memif3,role=client,socket=" + socket}}, &error);
  ASSERT_NE(b, nullptr) << error;
  ASSERT_GE(b->rx_wake_fd(), 0) << "the mesh's doorbell";
  ASSERT_TRUE(WaitUntilConnected(*a, *b, kHostB)) << "memif did not connect within 10 s";
  Receive(*b, 1000, std::chrono::milliseconds(100));       // what connecting left, and its rings
  b->Poll(64, [](std::span<const uint8_t>, uint16_t) {});  // quiet: the next poll drains rings
  b->Poll(64, [](std::span<const uint8_t>, uint16_t) {});
  ASSERT_FALSE(Readable(b->rx_wake_fd(), 0));

  EXPECT_EQ(Send(*a, Destination::Host(kHostB).Lazy(), 100, 0, 3), 3u);
  EXPECT_FALSE(Readable(b->rx_wake_fd(), 50)) << "lazy frames rang the doorbell";
  ExpectInOrder(Receive(*b, 3), 0, 3, kHostA);

  b->Poll(64, [](std::span<const uint8_t>, uint16_t) {});
  EXPECT_EQ(Send(*a, Destination::Host(kHostB), 100, 3, 1), 1u);
  EXPECT_TRUE(Readable(b->rx_wake_fd(), 1000)) << "a frame someone waits for must wake the peer";
  ExpectInOrder(Receive(*b, 1), 3, 1, kHostA);

  // Lazy frames first, then one waited for before a flush: one ring.
  b->Poll(64, [](std::span<const uint8_t>, uint16_t) {});
  b->Poll(64, [](std::span<const uint8_t>, uint16_t) {});
  ASSERT_FALSE(Readable(b->rx_wake_fd(), 0));
  EXPECT_EQ(Send(*a, Destination::Host(kHostB).Lazy(), 100, 4, 2), 2u);
  EXPECT_EQ(Send(*a, Destination::Host(kHostB), 100, 6, 1), 1u);
  EXPECT_TRUE(Readable(b->rx_wake_fd(), 1000));
  ExpectInOrder(Receive(*b, 3), 4, 3, kHostA);
  a.reset();
  b.reset();
  std::filesystem::remove_all(dir);
}

TEST(DpdkMemifTest, AMeshSendsEachMulticastFrameAsOneMbufOnEveryLink) {
  char dir_template[] = "/tmp/dsm-mesh-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  constexpr uint16_t kHostC = 3;
  constexpr MacAddr kMacC = {0x02, 0x64, 0x73, 0x6d, 0x00, 0x03};
  constexpr uint32_t kIpC = 0xc6120103;
  const Peer peer_c{kHostC, kMacC, kIpC};
  PortConfig ca = Config("", kHostA, kMacA, kIpA, 9000);
  PortConfig cb = Config("", kHostB, kMacB, kIpB, 9000);
  PortConfig cc = Config("", kHostC, kMacC, kIpC, 9000);
  for (PortConfig* c : {&ca, &cb, &cc}) c->peers.push_back(peer_c);
  std::string error;
  auto a = OpenLinkMeshTransport(ca,
                                 {{kHostB, "net_memif4,role=server,socket=" + dir + "/ab.sock"},
                                  {kHostC, "net_memif5,role=server,socket=" + dir + "/ac.sock"}},
                                 &error);
  ASSERT_NE(a, nullptr) << error;
  auto b = OpenLinkMeshTransport(
      cb, {{kHostA, "net_memif6,role=client,socket=" + dir + "/ab.sock"}}, &error);
  ASSERT_NE(b, nullptr) << error;
  auto c = OpenLinkMeshTransport(
      cc, {{kHostA, "net_memif7,role=client,socket=" + dir + "/ac.sock"}}, &error);
  ASSERT_NE(c, nullptr) << error;
  ASSERT_TRUE(WaitUntilConnected(*a, *b, kHostB) && WaitUntilConnected(*a, *c, kHostC));
  Receive(*b, 1000, std::chrono::milliseconds(100));  // what connecting left
  Receive(*c, 1000, std::chrono::milliseconds(100));

  // Heads and tails: each frame is built once, its tail attached once, and
  // both links send that one mbuf chain.
  std::unique_ptr<TailHold> hold = a->NewTailHold();
  ASSERT_NE(hold, nullptr);
  const TransportStats before = a->stats();
  std::vector<std::vector<uint8_t>> source(300);
  SendWithTails(*a, Destination::Group(kGroup), source, 8972, 0, hold.get());
  EXPECT_EQ(hold->frames_in_use(), 300u) << "one reference per frame, however many links";
  EXPECT_EQ(a->Flush(), 600u);
  EXPECT_EQ(hold->frames_in_use(), 0u) << "memif copied every frame out on both links";
  Scribble(source);
  ExpectInOrder(Receive(*b, 300), 0, 300, kHostA);
  ExpectInOrder(Receive(*c, 300), 0, 300, kHostA);
  const TransportStats after = a->stats();
  EXPECT_EQ(after.tx_tail_frames - before.tx_tail_frames, 300u);
  EXPECT_EQ(after.tx_frames - before.tx_frames, 600u);

  // Whole frames the same way; unicast still reaches its own link only.
  EXPECT_EQ(Send(*a, Destination::Group(kGroup), 1000, 300, 200), 400u);
  ExpectInOrder(Receive(*b, 200), 300, 200, kHostA);
  ExpectInOrder(Receive(*c, 200), 300, 200, kHostA);
  EXPECT_EQ(Send(*a, Destination::Host(kHostC), 1000, 500, 10), 10u);
  ExpectInOrder(Receive(*c, 10), 500, 10, kHostA);
  EXPECT_TRUE(Receive(*b, 1, std::chrono::milliseconds(100)).seqs.empty());
  a.reset();
  b.reset();
  c.reset();
  std::filesystem::remove_all(dir);
}

// ---- net_af_packet on a veth pair in a private network namespace -------------

bool HaveIp() { return std::system("ip -V >/dev/null 2>&1") == 0; }

bool Shell(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// Moves the test's thread into a fresh network namespace (so that nothing it
// creates is visible to the host), with a veth pair in it; undoes all of it.
class VethTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (af_packet sockets, veth, netns)";
    }
    if (!HaveIp()) {
      GTEST_SKIP() << "needs the ip tool (iproute2)";
    }
    original_ns_ = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(original_ns_, 0);
    if (unshare(CLONE_NEWNET) != 0) {
      GTEST_SKIP() << "cannot create a network namespace: " << std::strerror(errno);
    }
    in_private_ns_ = true;
    const std::string id = std::to_string(getpid() % 100000);
    a_ = "dsmt" + id + "a";
    b_ = "dsmt" + id + "b";
  }

  void TearDown() override {
    if (!a_.empty()) Shell("ip link del " + a_);
    if (in_private_ns_) {
      EXPECT_EQ(setns(original_ns_, CLONE_NEWNET), 0);
    }
    if (original_ns_ >= 0) close(original_ns_);
  }

  void MakePair(uint32_t mtu) {
    Shell("ip link del " + a_);
    ASSERT_TRUE(Shell("ip link add " + a_ + " mtu " + std::to_string(mtu) +
                      " type veth peer name " + b_ + " mtu " + std::to_string(mtu)));
    ASSERT_TRUE(Shell("ip link set " + a_ + " up"));
    ASSERT_TRUE(Shell("ip link set " + b_ + " up"));
  }

  // A veth pair of `mtu` with an af_packet transport on each end: A (host
  // kHostA) on a_, B on b_. Both null if either failed to open.
  std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> OpenAfPacketPair(uint32_t mtu) {
    MakePair(mtu);
    auto a = Open(Config("net_af_packet0,iface=" + a_, kHostA, kMacA, kIpA, mtu));
    auto b = Open(Config("net_af_packet1,iface=" + b_, kHostB, kMacB, kIpB, mtu));
    if (!a || !b) return {};
    return {std::move(a), std::move(b)};
  }

  std::string a_, b_;
  int original_ns_ = -1;
  bool in_private_ns_ = false;
};

void ExchangeBothWays(Transport& a, Transport& b, size_t bytes, uint32_t count) {
  for (uint32_t done = 0; done < count; done += 500) {
    const uint32_t n = std::min<uint32_t>(500, count - done);
    EXPECT_EQ(Send(a, Destination::Host(kHostB), bytes, done, n), n);
    ExpectInOrder(Receive(b, n), done, n, kHostA);
  }
  EXPECT_EQ(Send(b, Destination::Host(kHostA), bytes, 0, 10), 10u);
  ExpectInOrder(Receive(a, 10), 0, 10, kHostB);
}

TEST_F(VethTest, AfPacketMtu1500) {
  auto [a, b] = OpenAfPacketPair(1500);
  ASSERT_TRUE(a && b);
  ExchangeBothWays(*a, *b, a->max_payload_bytes(), 3000);
  ExchangeBothWays(*a, *b, 18, 100);
  const TransportStats s = b->stats();
  EXPECT_EQ(s.rx_dropped_malformed + s.rx_dropped_unknown_source, 0u);
}

TEST_F(VethTest, AfPacketJumboMtu9000) {
  auto [a, b] = OpenAfPacketPair(9000);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->max_payload_bytes(), 8972u);
  ExchangeBothWays(*a, *b, 8972, 2000);
}

// dsmd sleeps in its own epoll set and is woken by the af_packet socket.
TEST_F(VethTest, AfPacketWakeFdIsReadableExactlyWhileFramesWait) {
  auto [a, b] = OpenAfPacketPair(1500);
  ASSERT_TRUE(a && b);
  const int fd = b->rx_wake_fd();
  ASSERT_GE(fd, 0) << "net_af_packet's socket should be found at probe";
  EXPECT_NE(fd, a->rx_wake_fd());
  // No IPv6 chatter (router solicitations, MLD) that could arrive any time.
  for (const std::string& i : {a_, b_}) Shell("sysctl -qw net.ipv6.conf." + i + ".disable_ipv6=1");
  Receive(*b, 1000, std::chrono::milliseconds(200));  // what the kernel sent so far
  EXPECT_FALSE(Readable(fd, 50)) << "readable with nothing received";
  EXPECT_EQ(Send(*a, Destination::Host(kHostB), 100, 7, 3), 3u);
  EXPECT_TRUE(Readable(fd, 2000)) << "a frame came and the descriptor stayed quiet";
  ExpectInOrder(Receive(*b, 3), 7, 3, kHostA);
  EXPECT_FALSE(Readable(fd, 50)) << "still readable after every frame was taken";
}

TEST_F(VethTest, AfPacketSendsTailsInPlaceAndLetsGoOfThemOnceSent) {
  auto [a, b] = OpenAfPacketPair(9000);
  ASSERT_TRUE(a && b);
  std::unique_ptr<TailHold> hold = a->NewTailHold();
  ASSERT_NE(hold, nullptr) << "af_packet copies frames out as it sends them: tails can be attached";
  std::vector<std::vector<uint8_t>> source(200);
  for (uint32_t round = 0; round < 5; ++round) {
    SendWithTails(*a, Destination::Host(kHostB), source, 8972, round * 200, hold.get());
    // Queued, not sent: every frame still reads from its source.
    EXPECT_EQ(hold->frames_in_use(), 200u);
    EXPECT_EQ(a->Flush(), 200u);
    EXPECT_EQ(hold->frames_in_use(), 0u);
    Scribble(source);  // the device has its copies: changing the source is safe now
    ExpectInOrder(Receive(*b, 200), round * 200, 200, kHostA);
  }
  EXPECT_EQ(a->stats().tx_tail_frames, 1000u);
  // A tail too short to be worth an mbuf is copied.
  SendWithTails(*a, Destination::Host(kHostB), source, kHeadBytes + 100, 5000, hold.get());
  EXPECT_EQ(hold->frames_in_use(), 0u);
  // A hold dropped while frames still use it goes with the last of them.
  SendWithTails(*a, Destination::Host(kHostB), source, 4000, 6000, hold.get());
  hold.reset();
  EXPECT_EQ(a->Flush(), 400u);
  Received r = Receive(*b, 400);
  ASSERT_EQ(r.bad, 0u);
  ASSERT_EQ(r.seqs.size(), 400u);
  EXPECT_EQ(r.seqs[0], 5000u);
  EXPECT_EQ(r.seqs[200], 6000u);
  EXPECT_EQ(a->stats().tx_tail_frames, 1200u);
}

// Memory about to go away (a freed area): its queued frames are dropped and
// counted, the frames of other memory still go, in order.
TEST_F(VethTest, DroppingTailsDropsOnlyTheQueuedFramesOfThatHold) {
  auto [a, b] = OpenAfPacketPair(9000);
  ASSERT_TRUE(a && b);
  std::unique_ptr<TailHold> going = a->NewTailHold();
  std::unique_ptr<TailHold> staying = a->NewTailHold();
  ASSERT_TRUE(going && staying);
  std::vector<std::vector<uint8_t>> freed(100), kept(100);
  SendWithTails(*a, Destination::Host(kHostB), freed, 8000, 0, going.get());
  SendWithTails(*a, Destination::Host(kHostB), kept, 8000, 100, staying.get());
  SendWithTails(*a, Destination::Host(kHostB), freed, 8000, 200, going.get());
  ASSERT_EQ(going->frames_in_use(), 200u);
  const uint64_t dropped_before = a->stats().tx_dropped;
  EXPECT_EQ(a->DropTails(going.get()), 200u);
  EXPECT_EQ(going->frames_in_use(), 0u);
  EXPECT_EQ(staying->frames_in_use(), 100u);
  EXPECT_EQ(a->stats().tx_dropped, dropped_before + 200);
  Scribble(freed);  // what a freed area's pages may hold next
  EXPECT_EQ(a->Flush(), 100u);
  ExpectInOrder(Receive(*b, 100), 100, 100, kHostA);
  EXPECT_TRUE(Receive(*b, 1, std::chrono::milliseconds(200)).seqs.empty());
}

TEST_F(VethTest, AfPacketMulticastReachesJoinedHostsOnly) {
  MakePair(1500);
  PortConfig cb = Config("net_af_packet1,iface=" + b_, kHostB, kMacB, kIpB);
  cb.groups = {kGroup};
  auto a = Open(Config("net_af_packet0,iface=" + a_, kHostA, kMacA, kIpA));
  auto b = Open(cb);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(Send(*a, Destination::Group(kGroup), 1000, 0, 50), 50u);
  ExpectInOrder(Receive(*b, 50), 0, 50, kHostA);
  EXPECT_EQ(Send(*a, Destination::Group(kGroup + 1), 1000, 0, 5), 5u);
  EXPECT_TRUE(Receive(*b, 5, std::chrono::milliseconds(300)).seqs.empty());
  EXPECT_GE(b->stats().rx_dropped_not_for_us, 5u);
}

TEST_F(VethTest, UnknownSourcesAreDropped) {
  MakePair(1500);
  PortConfig cb = Config("net_af_packet1,iface=" + b_, kHostB, kMacB, kIpB);
  cb.peers = {{kHostB, kMacB, kIpB}};  // A is not a peer of B
  auto a = Open(Config("net_af_packet0,iface=" + a_, kHostA, kMacA, kIpA));
  auto b = Open(cb);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(Send(*a, Destination::Host(kHostB), 100, 0, 20), 20u);
  EXPECT_TRUE(Receive(*b, 20, std::chrono::milliseconds(300)).seqs.empty());
  EXPECT_EQ(b->stats().rx_dropped_unknown_source, 20u);
}

TEST_F(VethTest, KernelMtuBelowTheTransportsIsRejected) {
  MakePair(1500);
  std::string error;
  EXPECT_EQ(
      OpenDpdkTransport(Config("net_af_packet0,iface=" + a_, kHostA, kMacA, kIpA, 9000), &error),
      nullptr);
  EXPECT_NE(error.find("ip link set dev " + a_ + " mtu 9000"), std::string::npos) << error;
}

// net_tap: the kernel side injects frames with a packet socket; the port has
// RX interrupts, so a long wait ends when a frame arrives.
TEST_F(VethTest, TapWakesOnFramesAndKeepsItsOwnMac) {
  const std::string tap = "dsmt" + std::to_string(getpid() % 100000) + "t";
  PortConfig c = Config("net_tap0,iface=" + tap, kHostB, kMacB, kIpB);
  std::string error;
  std::unique_ptr<DpdkTransport> t = DpdkTransport::Open(c, &error);
  ASSERT_NE(t, nullptr) << error;
  EXPECT_EQ(t->mac(), kMacB);
  // The kernel side has a MAC of its own (else a bridge keeps B's unicast).
  const int probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq req{};
  std::strncpy(req.ifr_name, tap.c_str(), IFNAMSIZ - 1);
  ASSERT_EQ(ioctl(probe, SIOCGIFHWADDR, &req), 0);
  close(probe);
  EXPECT_NE(std::memcmp(req.ifr_hwaddr.sa_data, kMacB.data(), 6), 0);
  EXPECT_TRUE(t->rx_interrupts()) << "net_tap has RX interrupts in DPDK 22.11";

  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = static_cast<int>(if_nametoindex(tap.c_str()));
  to.sll_halen = 6;
  std::vector<uint8_t> frame(kFrameHeaderBytes + 100);
  WriteFrameHeaders(frame.data(), {kMacA, kMacB, kIpA, kIpB, 7400, 1}, 100);
  Fill(frame.data() + kFrameHeaderBytes, 100, 42);
  t->Poll(1000, [](std::span<const uint8_t>, uint16_t) {});  // whatever the kernel sent so far
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  });
  const auto start = Clock::now();
  Received r;
  while (r.seqs.empty() && Clock::now() - start < std::chrono::seconds(5)) {
    t->WaitForFrames(3'000'000);
    t->Poll(64, [&](std::span<const uint8_t> p, uint16_t source) {
      uint32_t seq = 0;
      if (Check(p, &seq)) {
        r.seqs.push_back(seq);
        r.sources.push_back(source);
      }
    });
  }
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  sender.join();
  close(fd);
  ASSERT_EQ(r.seqs.size(), 1u);
  EXPECT_EQ(r.seqs[0], 42u);
  EXPECT_EQ(r.sources[0], kHostA);
  EXPECT_LT(waited, 2.5) << "the 3 s wait did not end when the frame arrived";
}

}  // namespace
}  // namespace dsm::net
