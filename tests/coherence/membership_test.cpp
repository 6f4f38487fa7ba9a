#include "coherence/membership.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace dsm {
namespace {

constexpr uint64_t kDownAfter = 500'000'000;
using Ids = std::vector<uint16_t>;

TEST(MembershipTest, PeersStartDown) {
  Membership m({2, 5, 9}, kDownAfter);
  EXPECT_EQ(m.peer_ids(), (Ids{2, 5, 9}));
  for (uint16_t id : {2, 5, 9}) {
    EXPECT_TRUE(m.known(id));
    EXPECT_FALSE(m.up(id));
    EXPECT_EQ(m.last_heard_ns(id), 0u);
  }
  EXPECT_TRUE(m.Expire(10 * kDownAfter).empty()) << "never up: nothing goes down";
}

TEST(MembershipTest, AHostComesUpWhenFirstHeard) {
  Membership m({2, 5}, kDownAfter);
  EXPECT_EQ(m.Heard(2, 77, 1000), Membership::Event::kCameUp);
  EXPECT_TRUE(m.up(2));
  EXPECT_FALSE(m.up(5));
  EXPECT_EQ(m.last_heard_ns(2), 1000u);
  // Later heartbeats of the same incarnation, and other frames, are nothing new.
  EXPECT_EQ(m.Heard(2, 77, 2000), Membership::Event::kNone);
  EXPECT_EQ(m.Heard(2, 0, 3000), Membership::Event::kNone);
  EXPECT_EQ(m.last_heard_ns(2), 3000u);
}

TEST(MembershipTest, AnyFrameBringsAHostUpAndTheFirstIncarnationIsNoRestart) {
  Membership m({2}, kDownAfter);
  EXPECT_EQ(m.Heard(2, 0, 10), Membership::Event::kCameUp);  // data before any heartbeat
  EXPECT_EQ(m.Heard(2, 41, 20), Membership::Event::kNone);   // its incarnation, learnt now
  EXPECT_EQ(m.Heard(2, 41, 30), Membership::Event::kNone);
  EXPECT_EQ(m.Heard(2, 42, 40), Membership::Event::kRestarted);
}

TEST(MembershipTest, ANewIncarnationIsARestart) {
  Membership m({3}, kDownAfter);
  ASSERT_EQ(m.Heard(3, 100, 0), Membership::Event::kCameUp);
  EXPECT_EQ(m.Heard(3, 101, 5), Membership::Event::kRestarted);
  EXPECT_TRUE(m.up(3));
  // Reported once: the new incarnation is now the known one.
  EXPECT_EQ(m.Heard(3, 101, 6), Membership::Event::kNone);
  // A frame without an incarnation does not look like a restart.
  EXPECT_EQ(m.Heard(3, 0, 7), Membership::Event::kNone);
  EXPECT_EQ(m.Heard(3, 101, 8), Membership::Event::kNone);
}

TEST(MembershipTest, SilentHostsExpire) {
  Membership m({1, 2, 3}, kDownAfter);
  m.Heard(1, 11, 0);
  m.Heard(2, 22, 0);
  m.Heard(3, 33, 0);
  m.Heard(2, 22, 300'000'000);
  EXPECT_TRUE(m.Expire(kDownAfter).empty()) << "exactly down_after of silence is still up";
  EXPECT_EQ(m.Expire(kDownAfter + 1), (Ids{1, 3}));
  EXPECT_FALSE(m.up(1));
  EXPECT_TRUE(m.up(2));
  EXPECT_FALSE(m.up(3));
  EXPECT_TRUE(m.Expire(kDownAfter + 2).empty()) << "reported once";
  EXPECT_EQ(m.Expire(300'000'000 + kDownAfter + 1), (Ids{2}));
  EXPECT_EQ(m.last_heard_ns(2), 300'000'000u) << "expiry keeps the time last heard";
}

// Hosts 1 (incarnation 11) and 2 (22), heard at 0 and expired since.
Membership TwoExpiredHosts() {
  Membership m({1, 2}, kDownAfter);
  m.Heard(1, 11, 0);
  m.Heard(2, 22, 0);
  EXPECT_EQ(m.Expire(kDownAfter + 1).size(), 2u);
  return m;
}

TEST(MembershipTest, AnExpiredHostComesBackUpOrRestarted) {
  Membership m = TwoExpiredHosts();
  // Same incarnation: it was only silent.
  EXPECT_EQ(m.Heard(1, 11, kDownAfter + 2), Membership::Event::kCameUp);
  EXPECT_TRUE(m.up(1));
  // New incarnation: it restarted while we did not hear it.
  EXPECT_EQ(m.Heard(2, 23, kDownAfter + 2), Membership::Event::kRestarted);
  EXPECT_TRUE(m.up(2));
  EXPECT_EQ(m.Heard(2, 23, kDownAfter + 3), Membership::Event::kNone);
}

TEST(MembershipTest, AnExpiredHostIsBackOnlyWithAHeartbeatThatSaysWhetherItRestarted) {
  Membership m = TwoExpiredHosts();
  // Data or a subscription first: from the same daemon, or from a new one?
  EXPECT_EQ(m.Heard(1, 0, kDownAfter + 2), Membership::Event::kNone);
  EXPECT_EQ(m.Heard(2, 0, kDownAfter + 2), Membership::Event::kNone);
  EXPECT_FALSE(m.up(1));
  EXPECT_FALSE(m.up(2));
  EXPECT_EQ(m.Heard(1, 11, kDownAfter + 3), Membership::Event::kCameUp);
  EXPECT_EQ(m.Heard(2, 23, kDownAfter + 3), Membership::Event::kRestarted);
  EXPECT_TRUE(m.up(1) && m.up(2));
}

TEST(MembershipTest, UnknownHostsAreIgnored) {
  Membership m({1}, kDownAfter);
  EXPECT_FALSE(m.known(7));
  EXPECT_EQ(m.Heard(7, 5, 100), Membership::Event::kNone);
  EXPECT_EQ(m.Heard(7, 6, 200), Membership::Event::kNone);
  EXPECT_FALSE(m.known(7));
  EXPECT_FALSE(m.up(7));
  EXPECT_EQ(m.last_heard_ns(7), 0u);
  EXPECT_EQ(m.peer_ids(), Ids{1});
  EXPECT_TRUE(m.Expire(10 * kDownAfter).empty());
  EXPECT_FALSE(m.up(1));
}

TEST(MembershipTest, NoPeers) {
  Membership m({}, kDownAfter);
  EXPECT_TRUE(m.peer_ids().empty());
  EXPECT_EQ(m.Heard(1, 1, 1), Membership::Event::kNone);
  EXPECT_TRUE(m.Expire(kDownAfter * 2).empty());
}

}  // namespace
}  // namespace dsm
