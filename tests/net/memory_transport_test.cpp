// MemoryWire: the Transport contract (transport.h) as the DPDK transport
// keeps it, over memory. Every payload carries a sequence number and an XXH3.
#include "net/memory_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/tuning.h"
#include "net/udp_framing.h"
#include "tests/net/checked_payload.h"

namespace dsm::net {
namespace {

constexpr uint16_t kHostA = 1;
constexpr uint16_t kHostB = 2;
constexpr uint16_t kHostC = 3;
constexpr uint16_t kGroup = 9;

MacAddr MacOf(uint16_t host) { return {0x02, 0, 0, 0, 0, static_cast<uint8_t>(host)}; }
uint32_t IpOf(uint16_t host) { return (10u << 24) | host; }

// Host `host` of hosts 1..3, every other one a peer, in `groups`.
PortConfig Config(uint16_t host, std::vector<uint16_t> groups = {}, uint32_t mtu = 1500) {
  PortConfig c;
  c.host_id = host;
  c.mac = MacOf(host);
  c.ipv4 = IpOf(host);
  c.mtu_bytes = mtu;
  for (uint16_t h : {kHostA, kHostB, kHostC}) {
    if (h != host) c.peers.push_back({h, MacOf(h), IpOf(h)});
  }
  c.groups = std::move(groups);
  return c;
}

std::unique_ptr<Transport> Open(MemoryWire& wire, const PortConfig& c) {
  std::string error;
  std::unique_ptr<Transport> t = wire.Open(c, &error);
  EXPECT_NE(t, nullptr) << error;
  return t;
}

void Commit(Transport& t, Destination to, size_t bytes, uint32_t first, uint32_t count) {
  for (uint32_t s = first; s < first + count; ++s) {
    uint8_t* p = t.Reserve(to);
    ASSERT_NE(p, nullptr);
    Fill(p, bytes, s);
    t.Commit(bytes);
  }
}

// Payloads built whole in `source`, all but their first kHeadBytes offered
// by reference.
constexpr size_t kHeadBytes = 64;
void CommitWithTails(Transport& t, Destination to, std::vector<std::vector<uint8_t>>& source,
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

void Scribble(std::vector<std::vector<uint8_t>>& source) {
  for (auto& s : source) std::fill(s.begin(), s.end(), 0xee);
}

struct Received {
  std::vector<uint32_t> seqs;
  std::vector<uint16_t> sources;
  size_t bad = 0;
};

// Everything waiting for `t` (the wire delivers at Flush: no waiting needed).
Received ReceiveAll(Transport& t) {
  Received r;
  for (int i = 0; i < 1000; ++i) {
    const size_t n = t.Poll(64, [&](std::span<const uint8_t> payload, uint16_t source) {
      uint32_t seq = 0;
      if (Check(payload, &seq)) {
        r.seqs.push_back(seq);
        r.sources.push_back(source);
      } else {
        ++r.bad;
      }
    });
    if (n == 0) break;
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

TEST(MemoryTransportTest, UnicastReachesOnlyItsHostInOrderAfterFlush) {
  MemoryWire wire;
  auto a = Open(wire, Config(kHostA));
  auto b = Open(wire, Config(kHostB));
  auto c = Open(wire, Config(kHostC));
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->max_payload_bytes(), 1472u);
  Commit(*a, Destination::Host(kHostB), 1472, 0, 100);
  EXPECT_EQ(a->tx_backlog(), 100u);
  EXPECT_TRUE(ReceiveAll(*b).seqs.empty()) << "nothing is on the wire before Flush";
  EXPECT_EQ(a->Flush(), 100u);
  EXPECT_EQ(a->tx_backlog(), 0u);
  ExpectInOrder(ReceiveAll(*b), 0, 100, kHostA);
  EXPECT_TRUE(ReceiveAll(*c).seqs.empty());
  EXPECT_EQ(c->stats().rx_dropped_not_for_us, 0u) << "a switch: unicast goes to one port";
  const TransportStats sa = a->stats();
  const TransportStats sb = b->stats();
  EXPECT_EQ(sa.tx_frames, 100u);
  EXPECT_EQ(sa.tx_bytes, 100u * (kFrameHeaderBytes + 1472));
  EXPECT_EQ(sb.rx_frames, 100u);
  EXPECT_EQ(sb.rx_bytes, sa.tx_bytes);
  // Short frames are padded to the Ethernet minimum, as on a device.
  Commit(*a, Destination::Host(kHostC), 16, 500, 1);
  a->Flush();
  ExpectInOrder(ReceiveAll(*c), 500, 1, kHostA);
  EXPECT_EQ(c->stats().rx_bytes, kMinFrameBytes);
}

TEST(MemoryTransportTest, MulticastReachesEveryOtherHostThatJoinedTheGroup) {
  MemoryWire wire;
  auto a = Open(wire, Config(kHostA, {kGroup}));
  auto b = Open(wire, Config(kHostB, {kGroup}));
  auto c = Open(wire, Config(kHostC));  // not in the group
  ASSERT_TRUE(a && b && c);
  Commit(*a, Destination::Group(kGroup), 1000, 0, 50);
  EXPECT_EQ(a->Flush(), 50u);
  EXPECT_EQ(a->stats().tx_frames, 50u) << "one copy on the wire, whatever the receivers";
  ExpectInOrder(ReceiveAll(*b), 0, 50, kHostA);
  EXPECT_TRUE(ReceiveAll(*a).seqs.empty()) << "the sender does not hear itself";
  EXPECT_TRUE(ReceiveAll(*c).seqs.empty());
  EXPECT_EQ(c->stats().rx_dropped_not_for_us, 50u);
}

TEST(MemoryTransportTest, CallerMistakesAndUnknownSourcesAreCountedNotDelivered) {
  MemoryWire wire;
  PortConfig cb = Config(kHostB);
  cb.peers = {{kHostC, MacOf(kHostC), IpOf(kHostC)}};  // A is not a peer of B
  auto a = Open(wire, Config(kHostA));
  auto b = Open(wire, cb);
  ASSERT_TRUE(a && b);
  Commit(*a, Destination::Host(kHostB), 100, 0, 20);
  a->Flush();
  EXPECT_TRUE(ReceiveAll(*b).seqs.empty());
  EXPECT_EQ(b->stats().rx_dropped_unknown_source, 20u);

  Commit(*a, Destination::Host(77), 100, 0, 1);  // no such peer
  ASSERT_NE(a->Reserve(Destination::Host(kHostB)), nullptr);
  a->Commit(a->max_payload_bytes() + 1);  // oversized
  EXPECT_EQ(a->stats().tx_dropped, 2u);
  EXPECT_EQ(a->Flush(), 0u);
  // A second Reserve abandons the first frame.
  a->Reserve(Destination::Host(kHostB));
  uint8_t* p = a->Reserve(Destination::Host(kHostC));
  Fill(p, 100, 9);
  a->Commit(100);
  a->Commit(100);  // nothing reserved: nothing happens
  EXPECT_EQ(a->Flush(), 1u);
  EXPECT_EQ(b->stats().rx_frames + b->stats().rx_dropped_unknown_source, 20u);
  // C is a peer, but no port on the wire has its MAC: the frame is lost.
  EXPECT_EQ(wire.frames_lost(), 1u);
}

TEST(MemoryTransportTest, TailsAreReadWhenTheDeviceTakesTheFrameNotAtCommit) {
  MemoryWire wire;
  auto a = Open(wire, Config(kHostA, {}, 9000));
  auto b = Open(wire, Config(kHostB, {}, 9000));
  ASSERT_TRUE(a && b);
  std::unique_ptr<TailHold> hold = a->NewTailHold();
  ASSERT_NE(hold, nullptr);
  std::vector<std::vector<uint8_t>> source(200);
  CommitWithTails(*a, Destination::Host(kHostB), source, 8972, 0, hold.get());
  EXPECT_EQ(hold->frames_in_use(), 200u);
  EXPECT_EQ(a->stats().tx_tail_frames, 200u);
  EXPECT_EQ(a->Flush(), 200u);
  EXPECT_EQ(hold->frames_in_use(), 0u);
  Scribble(source);  // the device has its copies: changing the source is safe now
  ExpectInOrder(ReceiveAll(*b), 0, 200, kHostA);

  // Memory changed while frames still use it is what arrives: the reason
  // callers must wait for frames_in_use() == 0.
  CommitWithTails(*a, Destination::Host(kHostB), source, 8972, 200, hold.get());
  Scribble(source);
  a->Flush();
  const Received r = ReceiveAll(*b);
  EXPECT_EQ(r.bad, 200u);

  // A tail too short to be worth it is copied at once.
  CommitWithTails(*a, Destination::Host(kHostB), source, kHeadBytes + 100, 400, hold.get());
  EXPECT_EQ(hold->frames_in_use(), 0u);
  Scribble(source);
  a->Flush();
  ExpectInOrder(ReceiveAll(*b), 400, 200, kHostA);

  // A hold dropped while frames still use it goes with the last of them.
  CommitWithTails(*a, Destination::Host(kHostB), source, 4000, 600, hold.get());
  hold.reset();
  EXPECT_EQ(a->Flush(), 200u);
  ExpectInOrder(ReceiveAll(*b), 600, 200, kHostA);
}

TEST(MemoryTransportTest, ADeviceTakingFewFramesPerFlushKeepsTheRestQueuedAndInUse) {
  MemoryWire wire({.tx_frames_per_flush = 32});
  auto a = Open(wire, Config(kHostA, {}, 9000));
  auto b = Open(wire, Config(kHostB, {}, 9000));
  ASSERT_TRUE(a && b);
  std::unique_ptr<TailHold> hold = a->NewTailHold();
  std::vector<std::vector<uint8_t>> source(100);
  CommitWithTails(*a, Destination::Host(kHostB), source, 4000, 0, hold.get());
  EXPECT_EQ(a->Flush(), 32u);
  EXPECT_EQ(a->tx_backlog(), 68u);
  EXPECT_EQ(hold->frames_in_use(), 68u);
  size_t flushes = 1;
  while (a->tx_backlog() > 0 && flushes < 10) {
    a->Flush();
    ++flushes;
  }
  EXPECT_EQ(flushes, 4u);
  EXPECT_EQ(hold->frames_in_use(), 0u);
  ExpectInOrder(ReceiveAll(*b), 0, 100, kHostA);
}

TEST(MemoryTransportTest, DroppingTailsDropsOnlyTheQueuedFramesOfThatHold) {
  MemoryWire wire;
  auto a = Open(wire, Config(kHostA, {}, 9000));
  auto b = Open(wire, Config(kHostB, {}, 9000));
  ASSERT_TRUE(a && b);
  std::unique_ptr<TailHold> going = a->NewTailHold();
  std::unique_ptr<TailHold> staying = a->NewTailHold();
  std::vector<std::vector<uint8_t>> freed(100), kept(100);
  CommitWithTails(*a, Destination::Host(kHostB), freed, 8000, 0, going.get());
  CommitWithTails(*a, Destination::Host(kHostB), kept, 8000, 100, staying.get());
  CommitWithTails(*a, Destination::Host(kHostB), freed, 8000, 200, going.get());
  EXPECT_EQ(a->DropTails(going.get()), 200u);
  EXPECT_EQ(going->frames_in_use(), 0u);
  EXPECT_EQ(staying->frames_in_use(), 100u);
  EXPECT_EQ(a->stats().tx_dropped, 200u);
  Scribble(freed);
  EXPECT_EQ(a->Flush(), 100u);
  ExpectInOrder(ReceiveAll(*b), 100, 100, kHostA);
}

TEST(MemoryTransportTest, WithoutTailsInPlaceNoHoldIsGivenAndTailsAreCopied) {
  MemoryWire wire({.tails_in_place = false});
  auto a = Open(wire, Config(kHostA));
  auto b = Open(wire, Config(kHostB));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->NewTailHold(), nullptr);
  std::vector<std::vector<uint8_t>> source(10);
  CommitWithTails(*a, Destination::Host(kHostB), source, 1400, 0, nullptr);
  Scribble(source);
  a->Flush();
  ExpectInOrder(ReceiveAll(*b), 0, 10, kHostA);
  EXPECT_EQ(a->stats().tx_tail_frames, 0u);
}

TEST(MemoryTransportTest, AReceiverThatIsNotPolledHoldsRxRingFramesAndLosesTheRest) {
  MemoryWire wire;
  PortConfig cb = Config(kHostB);
  cb.rx_ring = 100;
  auto a = Open(wire, Config(kHostA));
  auto b = Open(wire, cb);
  ASSERT_TRUE(a && b);
  Commit(*a, Destination::Host(kHostB), 100, 0, 300);
  EXPECT_EQ(a->Flush(), 300u);
  EXPECT_EQ(wire.frames_lost(), 200u);
  ExpectInOrder(ReceiveAll(*b), 0, 100, kHostA);
}

TEST(MemoryTransportTest, WaitForFramesReturnsWhenAFrameArrives) {
  MemoryWire wire;
  auto a = Open(wire, Config(kHostA));
  auto b = Open(wire, Config(kHostB));
  ASSERT_TRUE(a && b);
  Commit(*a, Destination::Host(kHostB), 100, 0, 1);
  a->Flush();
  b->WaitForFrames(10'000'000);  // returns at once: a frame is waiting
  ExpectInOrder(ReceiveAll(*b), 0, 1, kHostA);
}

TEST(MemoryTransportTest, FaultsWrapAMemoryTransport) {
  MemoryWire wire;
  auto a = WithFaults(Open(wire, Config(kHostA)), {.drop = 0.2, .seed = 7});
  auto b = Open(wire, Config(kHostB));
  ASSERT_TRUE(a && b);
  Commit(*a, Destination::Host(kHostB), 200, 0, 1000);
  a->Flush();
  const Received r = ReceiveAll(*b);
  EXPECT_EQ(r.bad, 0u);
  EXPECT_EQ(r.seqs.size() + a->stats().faults_dropped, 1000u);
  EXPECT_GT(a->stats().faults_dropped, 100u);
}

TEST(MemoryTransportTest, AddressConflictsAndBadConfigurationsAreRejected) {
  MemoryWire wire;
  std::string error;
  auto a = wire.Open(Config(kHostA), &error);
  ASSERT_NE(a, nullptr) << error;
  EXPECT_EQ(wire.Open(Config(kHostA), &error), nullptr);
  EXPECT_NE(error.find("another port"), std::string::npos) << error;
  PortConfig tiny = Config(kHostB, {}, 28);
  EXPECT_EQ(wire.Open(tiny, &error), nullptr);
  EXPECT_NE(error.find("mtu"), std::string::npos) << error;
  PortConfig no_ip = Config(kHostB);
  no_ip.ipv4 = 0;
  EXPECT_EQ(wire.Open(no_ip, &error), nullptr);
  // A port gone leaves the wire: its MAC may be opened again.
  a.reset();
  EXPECT_NE(wire.Open(Config(kHostA), &error), nullptr) << error;
}

}  // namespace
}  // namespace dsm::net
