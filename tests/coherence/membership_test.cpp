#include "coherence/membership.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace dsm {
namespace {

constexpr uint64_t kDownAfter = 500'000'000;
constexpr uint64_t kHelloRetry = 10'000'000;
using Ids = std::vector<uint16_t>;
using Event = Membership::Event;

Membership Make(const Ids& peers) { return Membership(peers, kDownAfter, kHelloRetry, 42); }

// Believes `incarnation` of `host` at `now`: the first one heard is believed
// at once; a later one the way dsmd does it, a frame refused, a hello sent,
// the host's reply echoing its nonce.
Event Handshake(Membership& m, uint16_t host, uint32_t incarnation, uint64_t now) {
  const Membership::Admission a = m.Admit(host, incarnation, now);
  if (a.accepted) return a.event;
  EXPECT_NE(a.hello_nonce, 0u);
  return m.Confirm(host, a.hello_nonce, incarnation, now);
}

TEST(MembershipTest, PeersStartDownWithNoIncarnation) {
  Membership m = Make({2, 5, 9});
  EXPECT_EQ(m.peer_ids(), (Ids{2, 5, 9}));
  for (uint16_t id : {2, 5, 9}) {
    EXPECT_TRUE(m.known(id));
    EXPECT_FALSE(m.up(id));
    EXPECT_EQ(m.last_heard_ns(id), 0u);
    EXPECT_EQ(m.incarnation(id), 0u);
  }
  EXPECT_TRUE(m.Expire(10 * kDownAfter).empty()) << "never up: nothing goes down";
}

TEST(MembershipTest, TheFirstIncarnationHeardIsBelievedAtOnce) {
  Membership m = Make({2, 5});
  const Membership::Admission a = m.Admit(2, 77, 1000);
  EXPECT_TRUE(a.accepted);
  EXPECT_EQ(a.event, Event::kCameUp);
  EXPECT_EQ(a.hello_nonce, 0u);
  EXPECT_TRUE(m.up(2));
  EXPECT_FALSE(m.up(5));
  EXPECT_EQ(m.incarnation(2), 77u);
  EXPECT_EQ(m.last_heard_ns(2), 1000u);
  const Membership::Admission b = m.Admit(2, 77, 2000);
  EXPECT_TRUE(b.accepted);
  EXPECT_EQ(b.event, Event::kNone);
  EXPECT_EQ(b.hello_nonce, 0u);
  EXPECT_EQ(m.last_heard_ns(2), 2000u);
}

TEST(MembershipTest, ARestartIsBelievedOnlyFromTheHostsReply) {
  Membership m = Make({3});
  ASSERT_EQ(Handshake(m, 3, 100, 0), Event::kCameUp);
  // A frame under another incarnation: refused, and the host is asked.
  const Membership::Admission a = m.Admit(3, 101, 5);
  EXPECT_FALSE(a.accepted);
  ASSERT_NE(a.hello_nonce, 0u);
  EXPECT_EQ(m.incarnation(3), 100u) << "one frame changes no belief";
  EXPECT_TRUE(m.Admit(3, 100, 6).accepted) << "the believed incarnation still gets through";
  EXPECT_EQ(m.Confirm(3, a.hello_nonce, 101, 7), Event::kRestarted);
  EXPECT_EQ(m.incarnation(3), 101u);
  EXPECT_TRUE(m.up(3));
  EXPECT_FALSE(m.Admit(3, 100, 8).accepted) << "the old incarnation's frames are refused now";
  EXPECT_TRUE(m.Admit(3, 101, 9).accepted);
}

TEST(MembershipTest, AForgedIncarnationIsUndoneByTheHostsReply) {
  Membership m = Make({3});
  ASSERT_EQ(Handshake(m, 3, 100, 0), Event::kCameUp);
  const Membership::Admission forged = m.Admit(3, 0xdead, 10);
  ASSERT_NE(forged.hello_nonce, 0u);
  // The real host answers with the incarnation it always had.
  EXPECT_EQ(m.Confirm(3, forged.hello_nonce, 100, 20), Event::kNone);
  EXPECT_EQ(m.incarnation(3), 100u);
  EXPECT_TRUE(m.Admit(3, 100, 30).accepted);
}

TEST(MembershipTest, RepliesThatAnswerNoOutstandingHelloChangeNothing) {
  Membership m = Make({3});
  ASSERT_EQ(Handshake(m, 3, 100, 0), Event::kCameUp);
  const Membership::Admission a = m.Admit(3, 200, 10);
  ASSERT_NE(a.hello_nonce, 0u);
  EXPECT_EQ(m.Confirm(3, a.hello_nonce + 1, 200, 11), Event::kNone) << "wrong nonce";
  EXPECT_EQ(m.Confirm(3, 0, 200, 11), Event::kNone) << "no nonce";
  EXPECT_EQ(m.Confirm(3, a.hello_nonce, 0, 11), Event::kNone) << "incarnation 0 is never one";
  EXPECT_EQ(m.incarnation(3), 100u);
  EXPECT_EQ(m.Confirm(3, a.hello_nonce, 200, 12), Event::kRestarted);
  EXPECT_EQ(m.Confirm(3, a.hello_nonce, 300, 13), Event::kNone) << "a nonce is answered once";
  EXPECT_EQ(m.incarnation(3), 200u);
}

TEST(MembershipTest, HellosAreRepeatedOnlyAfterTheRetryTimeWithTheSameNonce) {
  Membership m = Make({4});
  ASSERT_TRUE(m.Admit(4, 8, 0).accepted);
  const Membership::Admission first = m.Admit(4, 9, 1000);
  ASSERT_NE(first.hello_nonce, 0u);
  EXPECT_EQ(m.Admit(4, 9, 1000 + kHelloRetry - 1).hello_nonce, 0u) << "one hello in flight";
  const Membership::Admission again = m.Admit(4, 9, 1000 + kHelloRetry);
  EXPECT_EQ(again.hello_nonce, first.hello_nonce) << "a late reply to the first still counts";
  EXPECT_EQ(m.Confirm(4, first.hello_nonce, 9, 1000 + kHelloRetry + 1), Event::kRestarted);
  // The next unknown incarnation is asked about with a fresh nonce.
  const Membership::Admission next = m.Admit(4, 10, 2 * kHelloRetry);
  EXPECT_NE(next.hello_nonce, 0u);
  EXPECT_NE(next.hello_nonce, first.hello_nonce);
}

TEST(MembershipTest, SilentHostsExpireAndComeBackWithTheirNextFrame) {
  Membership m = Make({1, 2, 3});
  Handshake(m, 1, 11, 0);
  Handshake(m, 2, 22, 0);
  Handshake(m, 3, 33, 0);
  m.Admit(2, 22, 300'000'000);
  EXPECT_TRUE(m.Expire(kDownAfter).empty()) << "exactly down_after of silence is still up";
  EXPECT_EQ(m.Expire(kDownAfter + 1), (Ids{1, 3}));
  EXPECT_FALSE(m.up(1));
  EXPECT_TRUE(m.up(2));
  EXPECT_FALSE(m.up(3));
  EXPECT_TRUE(m.Expire(kDownAfter + 2).empty()) << "reported once";
  EXPECT_EQ(m.Expire(300'000'000 + kDownAfter + 1), (Ids{2}));
  EXPECT_EQ(m.last_heard_ns(2), 300'000'000u) << "expiry keeps the time last heard";
  // Same incarnation: it was only silent; any of its frames says so.
  const Membership::Admission back = m.Admit(1, 11, kDownAfter * 3);
  EXPECT_TRUE(back.accepted);
  EXPECT_EQ(back.event, Event::kCameUp);
  EXPECT_TRUE(m.up(1));
  // A new incarnation while down: refused until confirmed, then a restart.
  EXPECT_EQ(Handshake(m, 3, 34, kDownAfter * 3), Event::kRestarted);
  EXPECT_TRUE(m.up(3));
}

TEST(MembershipTest, RefusedFramesKeepNoHostAlive) {
  Membership m = Make({1});
  Handshake(m, 1, 11, 0);
  for (uint64_t t = 1; t <= 10; ++t) m.Admit(1, 12, t * kDownAfter / 10);
  EXPECT_EQ(m.Expire(kDownAfter + 1), (Ids{1})) << "frames of an unconfirmed incarnation are not news";
}

TEST(MembershipTest, UnknownHostsAreIgnored) {
  Membership m = Make({1});
  EXPECT_FALSE(m.known(7));
  const Membership::Admission a = m.Admit(7, 5, 100);
  EXPECT_FALSE(a.accepted);
  EXPECT_EQ(a.hello_nonce, 0u) << "nobody to ask";
  EXPECT_EQ(m.Confirm(7, 1, 5, 200), Event::kNone);
  EXPECT_FALSE(m.known(7));
  EXPECT_FALSE(m.up(7));
  EXPECT_EQ(m.last_heard_ns(7), 0u);
  EXPECT_EQ(m.peer_ids(), Ids{1});
  EXPECT_TRUE(m.Expire(10 * kDownAfter).empty());
  EXPECT_FALSE(m.up(1));
}

TEST(MembershipTest, IncarnationZeroIsNeverAcceptedOrBelieved) {
  Membership m = Make({1});
  const Membership::Admission a = m.Admit(1, 0, 10);
  EXPECT_FALSE(a.accepted) << "no incarnation believed yet: 0 must not match";
  EXPECT_EQ(m.incarnation(1), 0u);
  ASSERT_NE(a.hello_nonce, 0u) << "the host is asked who it is";
  EXPECT_FALSE(m.Admit(1, 11, 15).accepted) << "not believed while a hello is out";
  EXPECT_EQ(m.Confirm(1, a.hello_nonce, 11, 20), Event::kCameUp);
  EXPECT_EQ(m.incarnation(1), 11u);
  EXPECT_FALSE(m.Admit(1, 0, 30).accepted);
  EXPECT_TRUE(m.Admit(1, 11, 40).accepted);
}

}  // namespace
}  // namespace dsm
