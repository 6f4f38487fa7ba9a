#include "coherence/replica_sender.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

namespace dsm {
namespace {

constexpr size_t kArea = 64 * 1024;  // 1024 lines, 16 pages
constexpr uint64_t kRto = 20'000'000;

LineSet Lines(std::initializer_list<size_t> lines, size_t area = kArea) {
  LineSet s(area);
  for (size_t l : lines) s.AddLines(l, 1);
  return s;
}

std::vector<size_t> Marked(const LineSet& s) {
  std::vector<size_t> out;
  s.ForEachRun([&](size_t first, size_t count) {
    for (size_t i = 0; i < count; ++i) out.push_back(first + i);
  });
  return out;
}

using Hosts = std::vector<uint16_t>;

// A sender with `host` holding version `v` (acknowledged), nothing in flight.
void BringUpToDate(ReplicaSender& s, uint16_t host, uint64_t now) {
  Transfer t;
  while (s.NextTransfer(now, kRto, &t)) s.Sent(t, now);
  s.OnAck(host, s.version());
}

// Host 1 holds version 1 (acknowledged); version 2 with `changed` is sent to
// it at `t0` and awaits acknowledgement. Returns that transfer.
Transfer OneTransferOut(ReplicaSender& s, const LineSet& changed, uint64_t t0) {
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);
  s.Collected(2, changed);
  Transfer t;
  EXPECT_TRUE(s.NextTransfer(t0, kRto, &t));
  s.Sent(t, t0);
  return t;
}

TEST(ReplicaSenderTest, NothingToSendBeforeTheFirstCollect) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  EXPECT_TRUE(s.subscribed(1));
  EXPECT_EQ(s.subscribers(), 1u);
  Transfer t;
  EXPECT_FALSE(s.NextTransfer(0, kRto, &t));
  EXPECT_FALSE(s.AwaitingAcks(0, kRto));
}

TEST(ReplicaSenderTest, NewSubscriberGetsAFullTransferOfTheCurrentVersion) {
  ReplicaSender s(kArea);
  s.Collected(4, Lines({1, 2}));
  s.Collected(5, Lines({3}));
  s.Subscribe(7);
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(100, kRto, &t));
  EXPECT_EQ(t.hosts, Hosts{7});
  EXPECT_TRUE(t.full);
  EXPECT_EQ(t.version, 5u);
  ASSERT_NE(t.lines, nullptr);
  EXPECT_EQ(t.lines->CountLines(), 1024u);
  EXPECT_NE(t.transfer_id, 0u);
}

TEST(ReplicaSenderTest, FullTransferCoversThePartialLastLine) {
  const size_t area = 1000;  // 15 whole lines and a partial 16th
  ReplicaSender s(area);
  s.Subscribe(1);
  s.Collected(1, Lines({0}, area));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  EXPECT_TRUE(t.full);
  EXPECT_EQ(t.lines->CountLines(), 16u);
  EXPECT_TRUE(t.lines->Test(15));
}

TEST(ReplicaSenderTest, AfterAnAckDeltasCarryExactlyTheLinesChangedSince) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  s.Sent(t, 0);
  s.OnAck(1, 1);
  EXPECT_EQ(s.acked(1), 1u);
  EXPECT_FALSE(s.NextTransfer(1, kRto, &t)) << "up to date";
  EXPECT_FALSE(s.AwaitingAcks(1, kRto));

  s.Collected(2, Lines({10, 11}));
  s.Collected(3, Lines({200, 11}));
  ASSERT_TRUE(s.NextTransfer(2, kRto, &t));
  EXPECT_EQ(t.hosts, Hosts{1});
  EXPECT_FALSE(t.full);
  EXPECT_EQ(t.base, 1u);
  EXPECT_EQ(t.version, 3u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{10, 11, 200}));
  s.Sent(t, 2);
  s.OnAck(1, 3);
  EXPECT_EQ(s.acked(1), 3u);

  s.Collected(4, Lines({7, 1023}));
  ASSERT_TRUE(s.NextTransfer(3, kRto, &t));
  EXPECT_FALSE(t.full);
  EXPECT_EQ(t.base, 3u);
  EXPECT_EQ(t.version, 4u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{7, 1023}));
}

TEST(ReplicaSenderTest, MinAckedIsTheSlowestSubscribedHost) {
  ReplicaSender s(kArea);
  EXPECT_EQ(s.MinAcked(), UINT64_MAX) << "nobody to wait for";
  s.Subscribe(1);
  s.Subscribe(2);
  EXPECT_EQ(s.MinAcked(), 0u) << "neither holds a version yet";
  s.Collected(1, Lines({0}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  s.Sent(t, 0);
  s.OnAck(1, 1);
  EXPECT_EQ(s.MinAcked(), 0u) << "host 2 has not acknowledged";
  s.OnAck(2, 1);
  EXPECT_EQ(s.MinAcked(), 1u);
  s.Collected(2, Lines({5}));
  ASSERT_TRUE(s.NextTransfer(1, kRto, &t));
  s.Sent(t, 1);
  s.OnAck(2, 2);
  EXPECT_EQ(s.MinAcked(), 1u);
  s.Unsubscribe(1);  // e.g. host 1 went down: it no longer holds anyone back
  EXPECT_EQ(s.MinAcked(), 2u);
}

TEST(ReplicaSenderTest, ChangesCollectedWhileTheFullTransferIsOutFollowIt) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  s.Sent(t, 0);
  s.Collected(2, Lines({40}));  // after the full transfer of version 1
  s.OnAck(1, 1);
  ASSERT_TRUE(s.NextTransfer(1, kRto, &t));
  EXPECT_FALSE(t.full);
  EXPECT_EQ(t.base, 1u);
  EXPECT_EQ(t.version, 2u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{40}));
}

TEST(ReplicaSenderTest, OneTransferInFlightPerHostUntilAckOrRto) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);

  s.Collected(2, Lines({5}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(1000, kRto, &t));
  s.Sent(t, 1000);
  s.Collected(3, Lines({6}));
  EXPECT_FALSE(s.NextTransfer(1000, kRto, &t));
  EXPECT_FALSE(s.NextTransfer(1000 + kRto - 1, kRto, &t));
  // The ack of version 2 frees the host: version 3 follows at once.
  s.OnAck(1, 2);
  ASSERT_TRUE(s.NextTransfer(1001, kRto, &t));
  EXPECT_EQ(t.base, 2u);
  EXPECT_EQ(t.version, 3u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{6}));
}

TEST(ReplicaSenderTest, AfterRtoTheResendIsTheUnionAtTheNewestVersionWithTheSameBase) {
  ReplicaSender s(kArea);
  const uint64_t t0 = 5'000'000;
  const Transfer first = OneTransferOut(s, Lines({10, 12}), t0);
  s.Collected(3, Lines({20, 12}));

  Transfer t;
  EXPECT_FALSE(s.NextTransfer(t0 + kRto - 1, kRto, &t));
  ASSERT_TRUE(s.NextTransfer(t0 + kRto, kRto, &t));
  EXPECT_EQ(t.hosts, Hosts{1});
  EXPECT_FALSE(t.full);
  EXPECT_EQ(t.base, 1u);
  EXPECT_EQ(t.version, 3u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{10, 12, 20}));
  EXPECT_NE(t.transfer_id, first.transfer_id);
  s.Sent(t, t0 + kRto);

  // A second timeout without anything new (and still not a word from the
  // host, so the timeout doubled): the same union again.
  Transfer again;
  EXPECT_FALSE(s.NextTransfer(t0 + 3 * kRto - 1, kRto, &again));
  ASSERT_TRUE(s.NextTransfer(t0 + 3 * kRto, kRto, &again));
  EXPECT_EQ(again.base, 1u);
  EXPECT_EQ(again.version, 3u);
  EXPECT_EQ(Marked(*again.lines), (std::vector<size_t>{10, 12, 20}));
  s.Sent(again, t0 + 3 * kRto);

  s.OnAck(1, 3);
  EXPECT_EQ(s.acked(1), 3u);
  EXPECT_FALSE(s.NextTransfer(t0 + 10 * kRto, kRto, &t));
}

TEST(ReplicaSenderTest, ALostTransferThatCannotBeResentIsReplacedAtOnceByTheUnion) {
  ReplicaSender s(kArea);
  const uint64_t t0 = 5'000'000;
  const Transfer lost = OneTransferOut(s, Lines({10}), t0);
  s.Collected(3, Lines({20}));

  Transfer t;
  s.OnLostTransfer(1, lost.transfer_id + 1);  // not the one it awaits: nothing changes
  EXPECT_FALSE(s.AnyDue(t0 + 1, kRto));
  EXPECT_FALSE(s.NextTransfer(t0 + 1, kRto, &t));
  s.OnLostTransfer(2, lost.transfer_id);  // not subscribed
  s.OnLostTransfer(1, lost.transfer_id);
  EXPECT_TRUE(s.AnyDue(t0 + 1, kRto));
  ASSERT_TRUE(s.NextTransfer(t0 + 1, kRto, &t)) << "due before the timeout";
  EXPECT_EQ(t.base, 1u);
  EXPECT_EQ(t.version, 3u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{10, 20}));
  s.Sent(t, t0 + 1);
  // A late report about the transfer it replaced does not send it again.
  s.OnLostTransfer(1, lost.transfer_id);
  EXPECT_FALSE(s.NextTransfer(t0 + 2, kRto, &t));
  s.OnAck(1, 3);
  EXPECT_EQ(s.acked(1), 3u);
}

// A host that reports missing frames, and gets them resent, is making
// progress on the transfer it awaits: its timeout starts again, so it is not
// sent a new transfer (which it would have to assemble from its first frame)
// while it is one resend away from completing this one.
TEST(ReplicaSenderTest, ResendingWhatAHostAskedForRestartsItsTimeout) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Subscribe(2);
  s.Collected(1, Lines({0}));
  Transfer full;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &full));
  s.Sent(full, 0);

  s.OnResent(1, full.transfer_id + 1, kRto - 1);  // not the transfer it awaits: no effect
  s.OnResent(3, full.transfer_id, kRto - 1);      // not subscribed
  s.OnResent(1, full.transfer_id, kRto - 1);
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(kRto, kRto, &t)) << "host 2 asked for nothing: it times out";
  EXPECT_EQ(t.hosts, (std::vector<uint16_t>{2}));
  s.Sent(t, kRto);
  EXPECT_TRUE(s.AwaitingAcks(2 * kRto - 2, kRto));
  EXPECT_FALSE(s.NextTransfer(2 * kRto - 2, kRto, &t)) << "host 1 is within its timeout";
  ASSERT_TRUE(s.NextTransfer(2 * kRto, kRto, &t)) << "and times out when it stops asking";
  EXPECT_EQ(t.hosts, (std::vector<uint16_t>{1})) << "host 2's timeout doubled: it said nothing";
}

TEST(ReplicaSenderTest, AckOfTheOlderTransferAdvancesTheBaseButKeepsTheNewerInFlight) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);

  s.Collected(2, Lines({10}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  s.Sent(t, 0);  // 1 -> 2
  s.Collected(3, Lines({20}));
  ASSERT_TRUE(s.NextTransfer(kRto, kRto, &t));
  s.Sent(t, kRto);  // 1 -> 3
  s.OnAck(1, 2);    // the first one completed after all
  EXPECT_EQ(s.acked(1), 2u);
  EXPECT_TRUE(s.AwaitingAcks(kRto + 1, kRto)) << "1 -> 3 is still out";
  EXPECT_FALSE(s.NextTransfer(kRto + 1, kRto, &t));
  // If 1 -> 3 is lost, the resend starts from 2 and carries (at least) line 20.
  ASSERT_TRUE(s.NextTransfer(2 * kRto, kRto, &t));
  EXPECT_FALSE(t.full);
  EXPECT_EQ(t.base, 2u);
  EXPECT_EQ(t.version, 3u);
  EXPECT_TRUE(t.lines->Test(20));
}

TEST(ReplicaSenderTest, HostsInTheSameStateShareOneTransfer) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Subscribe(2);
  s.Subscribe(3);
  s.Collected(1, Lines({0}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  EXPECT_EQ(t.hosts, (Hosts{1, 2, 3}));
  EXPECT_TRUE(t.full);
  s.Sent(t, 0);
  EXPECT_FALSE(s.NextTransfer(1, kRto, &t));

  s.OnAck(1, 1);
  s.OnAck(2, 1);  // host 3 stays silent
  s.Collected(2, Lines({5}));
  ASSERT_TRUE(s.NextTransfer(10, kRto, &t));
  EXPECT_EQ(t.hosts, (Hosts{1, 2}));
  EXPECT_FALSE(t.full);
  EXPECT_EQ(t.base, 1u);
  EXPECT_EQ(t.version, 2u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{5}));
  s.Sent(t, 10);
  EXPECT_FALSE(s.NextTransfer(11, kRto, &t)) << "host 3's full transfer is not due yet";

  // Host 1 moves on to 2; host 2 stays at 1; host 3 times out (no base).
  s.OnAck(1, 2);
  s.Collected(3, Lines({6}));
  const uint64_t now = kRto;  // host 3's rto has passed, host 2's has not
  Transfer a, b;
  ASSERT_TRUE(s.NextTransfer(now, kRto, &a));
  EXPECT_EQ(a.hosts, Hosts{1});
  EXPECT_FALSE(a.full);
  EXPECT_EQ(a.base, 2u);
  EXPECT_EQ(a.version, 3u);
  EXPECT_EQ(Marked(*a.lines), (std::vector<size_t>{6}));
  s.Sent(a, now);
  ASSERT_TRUE(s.NextTransfer(now, kRto, &b));
  EXPECT_EQ(b.hosts, Hosts{3});
  EXPECT_TRUE(b.full);
  EXPECT_EQ(b.version, 3u);
  EXPECT_NE(a.transfer_id, b.transfer_id);
  s.Sent(b, now);
  EXPECT_FALSE(s.NextTransfer(now, kRto, &t));

  // Host 2 times out too: its resend is based on 1.
  ASSERT_TRUE(s.NextTransfer(10 + kRto, kRto, &t));
  EXPECT_EQ(t.hosts, Hosts{2});
  EXPECT_EQ(t.base, 1u);
  EXPECT_EQ(t.version, 3u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{5, 6}));
}

TEST(ReplicaSenderTest, HostsOneVersionBehindShareTheCollectedChangesWithoutACopy) {
  ReplicaSender s(kArea, /*shared_transfers=*/false);
  for (uint16_t h : {1, 2, 3}) s.Subscribe(h);
  s.Collected(1, Lines({0}));
  for (uint16_t h : {1, 2, 3}) BringUpToDate(s, h, 0);
  const LineSet changed = Lines({5, 6, 700});
  s.Collected(2, changed);
  // Each host its own transfer (unicast), all the one set of version 2's lines.
  std::vector<Transfer> out(3);
  for (Transfer& t : out) {
    ASSERT_TRUE(s.NextTransfer(10, kRto, &t));
    EXPECT_TRUE(s.CarriesCollectedChanges(t));
    EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{5, 6, 700}));
    EXPECT_EQ(t.lines, out[0].lines);
    s.Sent(t, 10);
  }
  // Host 1 acknowledges; hosts 2 and 3 do not. At version 3 host 1 again
  // shares the collected set; the others, past their timeout, get the union.
  s.OnAck(1, 2, 20);
  s.Collected(3, Lines({9}));
  Transfer t1;
  ASSERT_TRUE(s.NextTransfer(30, kRto, &t1));
  ASSERT_EQ(t1.hosts, Hosts{1});
  EXPECT_TRUE(s.CarriesCollectedChanges(t1));
  EXPECT_EQ(Marked(*t1.lines), (std::vector<size_t>{9}));
  s.Sent(t1, 30);
  Transfer t2;
  ASSERT_TRUE(s.NextTransfer(10 + kRto, kRto, &t2));
  EXPECT_FALSE(s.CarriesCollectedChanges(t2));
  EXPECT_EQ(Marked(*t2.lines), (std::vector<size_t>{5, 6, 9, 700}));
  EXPECT_EQ(t2.base, 1u);
  // Version 2's transfers are still held: the union is another set.
  EXPECT_NE(t2.lines, out[0].lines);
  EXPECT_EQ(Marked(*out[0].lines), (std::vector<size_t>{5, 6, 700}));
}

TEST(ReplicaSenderTest, ACollectedSetFromThePoolIsTakenAsItIs) {
  // The export fills one of the sender's sets with a staged version's lines
  // and hands it over: the transfers carry that set itself, not a copy.
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);
  std::shared_ptr<LineSet> lines = s.NewSet();
  ASSERT_TRUE(lines->Empty());
  lines->AddLines(40, 3);
  const LineSet* filled = lines.get();
  s.Collected(2, std::move(lines));
  EXPECT_EQ(s.version(), 2u);
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(10, kRto, &t));
  EXPECT_EQ(t.lines.get(), filled);
  EXPECT_TRUE(s.CarriesCollectedChanges(t));
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{40, 41, 42}));
  EXPECT_EQ(t.base, 1u);
  // While a transfer holds it, the pool does not hand it out again.
  EXPECT_NE(s.NewSet().get(), filled);
}

TEST(ReplicaSenderTest, HostsWithDifferentBasesShareOneTransferFromTheOlderBase) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Subscribe(2);
  s.Collected(1, Lines({0}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  s.Sent(t, 0);
  s.OnAck(1, 1);
  s.OnAck(2, 1);
  s.Collected(2, Lines({8}));
  ASSERT_TRUE(s.NextTransfer(1, kRto, &t));
  ASSERT_EQ(t.hosts, (Hosts{1, 2}));
  s.Sent(t, 1);
  s.OnAck(1, 2);  // host 2 has not acknowledged 2 yet
  s.Collected(3, Lines({9}));
  ASSERT_TRUE(s.NextTransfer(2, kRto, &t));
  EXPECT_EQ(t.hosts, Hosts{1});
  EXPECT_EQ(t.base, 2u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{9}));
  s.Sent(t, 2);
  s.OnAck(2, 2);
  s.OnAck(1, 3);
  s.Collected(4, Lines({30}));
  // Host 1 acked 3, host 2 acked 2: one transfer from base 2 serves both.
  ASSERT_TRUE(s.NextTransfer(3, kRto, &t));
  s.Sent(t, 3);
  EXPECT_FALSE(s.NextTransfer(3, kRto, &t)) << "both are in flight";
  ASSERT_TRUE(s.NextTransfer(3 + kRto, kRto, &t)) << "the RTO resends the same union";
  EXPECT_EQ(t.hosts, (Hosts{1, 2}));
  EXPECT_EQ(t.base, 2u);
  EXPECT_EQ(t.version, 4u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{9, 30}));
  s.Sent(t, 3 + kRto);
  // Once both acknowledge, each is up to date.
  s.OnAck(1, 4);
  s.OnAck(2, 4);
  EXPECT_EQ(s.MinAcked(), 4u);
  EXPECT_FALSE(s.NextTransfer(4 + 2 * kRto, kRto, &t));
}

TEST(ReplicaSenderTest, WithoutSharedTransfersEachHostGetsItsOwn) {
  ReplicaSender s(kArea, /*shared_transfers=*/false);
  s.Subscribe(1);
  s.Subscribe(2);
  s.Collected(1, Lines({0}));
  Transfer a, b, t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &a));
  s.Sent(a, 0);
  ASSERT_TRUE(s.NextTransfer(0, kRto, &b));
  s.Sent(b, 0);
  EXPECT_FALSE(s.NextTransfer(0, kRto, &t));
  EXPECT_EQ(a.hosts, Hosts{1});
  EXPECT_EQ(b.hosts, Hosts{2});
  EXPECT_TRUE(a.full && b.full);
}

TEST(ReplicaSenderTest, AHostThatAcksALowerVersionIsResetToFull) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);
  s.Collected(2, Lines({4}));
  s.Collected(3, Lines({5}));
  BringUpToDate(s, 1, 1);
  ASSERT_EQ(s.acked(1), 3u);

  s.OnAck(1, 1);  // went backwards: it lost its copy
  EXPECT_EQ(s.acked(1), 0u);
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(2, kRto, &t));
  EXPECT_TRUE(t.full);
  EXPECT_EQ(t.version, 3u);
  EXPECT_EQ(t.lines->CountLines(), 1024u);
  s.Sent(t, 2);
  s.OnAck(1, 3);
  EXPECT_EQ(s.acked(1), 3u);
  EXPECT_FALSE(s.NextTransfer(3, kRto, &t));
}

TEST(ReplicaSenderTest, AckOfNothingFromAHostWithABaseResetsItToFull) {
  // An ACK with kFlagFull ("I hold nothing") from a host that had a base.
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(6, Lines({0}));
  BringUpToDate(s, 1, 0);
  s.Collected(7, Lines({1}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(1, kRto, &t));
  EXPECT_FALSE(t.full);
  s.Sent(t, 1);
  s.OnAckNothing(1);
  EXPECT_FALSE(s.AwaitingAcks(2, kRto)) << "the reset forgets what was in flight";
  ASSERT_TRUE(s.NextTransfer(2, kRto, &t));
  EXPECT_TRUE(t.full);
  EXPECT_EQ(t.version, 7u);
}

TEST(ReplicaSenderTest, Unsubscribe) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Subscribe(2);
  s.Collected(1, Lines({0}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  ASSERT_EQ(t.hosts, (Hosts{1, 2}));
  s.Unsubscribe(2);
  EXPECT_FALSE(s.subscribed(2));
  EXPECT_EQ(s.subscribers(), 1u);
  s.Sent(t, 0);  // names a host that is gone: ignored
  s.OnAck(2, 1);  // ignored too
  EXPECT_EQ(s.acked(2), 0u);
  s.OnAck(1, 1);
  EXPECT_FALSE(s.AwaitingAcks(1, kRto));
  s.Collected(2, Lines({3}));
  ASSERT_TRUE(s.NextTransfer(1, kRto, &t));
  EXPECT_EQ(t.hosts, Hosts{1});
  s.Unsubscribe(1);
  EXPECT_EQ(s.subscribers(), 0u);
  EXPECT_FALSE(s.NextTransfer(2, kRto, &t));
  s.Unsubscribe(1);  // twice: harmless

  // Subscribing again starts from scratch.
  s.Subscribe(1);
  ASSERT_TRUE(s.NextTransfer(3, kRto, &t));
  EXPECT_TRUE(t.full);
  EXPECT_EQ(t.version, 2u);
}

TEST(ReplicaSenderTest, AwaitingAcksWithinRtoAfterSentUntilAckOrRto) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Subscribe(2);
  s.Collected(1, Lines({0}));
  EXPECT_FALSE(s.AwaitingAcks(0, kRto));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  EXPECT_FALSE(s.AwaitingAcks(0, kRto)) << "not sent yet";
  const uint64_t t0 = 1'000'000;
  s.Sent(t, t0);
  EXPECT_TRUE(s.AwaitingAcks(t0, kRto));
  EXPECT_TRUE(s.AwaitingAcks(t0 + kRto - 1, kRto));
  EXPECT_FALSE(s.AwaitingAcks(t0 + kRto, kRto));
  s.OnAck(1, 1);
  EXPECT_TRUE(s.AwaitingAcks(t0 + 1, kRto)) << "host 2 has not acknowledged";
  s.OnAck(2, 1);
  EXPECT_FALSE(s.AwaitingAcks(t0 + 1, kRto));
}

TEST(ReplicaSenderTest, AVersionZeroTransferIsTrackedAsInFlight) {
  // Version 0 is a version like any other, not "nothing in flight".
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(0, Lines({0}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(0, kRto, &t));
  EXPECT_TRUE(t.full);
  EXPECT_EQ(t.version, 0u);
  s.Sent(t, 0);
  EXPECT_TRUE(s.AwaitingAcks(1, kRto));
  EXPECT_FALSE(s.NextTransfer(1, kRto, &t)) << "in flight: no second transfer before rto";
  ASSERT_TRUE(s.NextTransfer(kRto, kRto, &t));
  EXPECT_TRUE(t.full);
  EXPECT_EQ(t.version, 0u);
  s.Sent(t, kRto);
  EXPECT_TRUE(s.AwaitingAcks(kRto + 1, kRto));
  s.OnAck(1, 0);  // completed version 0
  EXPECT_FALSE(s.AwaitingAcks(kRto + 1, kRto));
  EXPECT_FALSE(s.NextTransfer(kRto + 1, kRto, &t));
  s.Collected(1, Lines({4}));
  ASSERT_TRUE(s.NextTransfer(kRto + 2, kRto, &t));
  EXPECT_FALSE(t.full);
  EXPECT_EQ(t.base, 0u);
  EXPECT_EQ(t.version, 1u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{4}));
}

TEST(ReplicaSenderTest, TransferIdsAreDistinct) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  std::vector<uint32_t> ids;
  Transfer t;
  for (int i = 0; i < 5; ++i) {
    const uint64_t at = uint64_t(i) * 2 * ReplicaSender::kMaxRtoNs;  // past any backed-off timeout
    ASSERT_TRUE(s.NextTransfer(at, kRto, &t));
    s.Sent(t, at);
    for (uint32_t id : ids) EXPECT_NE(id, t.transfer_id);
    ids.push_back(t.transfer_id);
  }
}

}  // namespace
}  // namespace dsm

// ---- the timeout follows what a host's acknowledgements take ----------------

namespace dsm {
namespace {

// Sends version v to host 1 at `at` (changing line v) and returns the time.
uint64_t SendNext(ReplicaSender& s, uint64_t v, uint64_t at) {
  s.Collected(v, Lines({static_cast<size_t>(v)}));
  Transfer t;
  EXPECT_TRUE(s.NextTransfer(at, kRto, &t));
  s.Sent(t, at);
  return at;
}

// Host 1 acknowledges versions 2..9 each `ack_ns` after it was sent; then
// version 10 is sent and 11 collected. Returns when 10 was sent.
uint64_t AckEachAfter(ReplicaSender& s, uint64_t ack_ns) {
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);
  uint64_t now = 1'000'000'000;
  for (uint64_t v = 2; v < 10; ++v) {
    SendNext(s, v, now);
    now += ack_ns;
    s.OnAck(1, v, now);
  }
  SendNext(s, 10, now);
  s.Collected(11, Lines({11}));
  return now;
}

TEST(ReplicaSenderRtoTest, AHostWhoseAcksTakeLongerThanTheTimeoutIsNotSentUnionsMeanwhile) {
  ReplicaSender s(kArea);
  // Its acknowledgements come 30 ms after each transfer (the base timeout is 20).
  const uint64_t now = AckEachAfter(s, 30'000'000);
  Transfer t;
  EXPECT_FALSE(s.NextTransfer(now + kRto, kRto, &t)) << "30 ms is this host's normal";
  EXPECT_FALSE(s.NextTransfer(now + 30'000'000, kRto, &t));
  // The hold on the shadow does not grow: the other hosts are not kept waiting.
  EXPECT_FALSE(s.AwaitingAcks(now + kRto, kRto));
  // Silence well beyond its usual time: the union goes.
  ASSERT_TRUE(s.NextTransfer(now + 100'000'000, kRto, &t));
  EXPECT_EQ(t.base, 9u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{10, 11}));
}

TEST(ReplicaSenderRtoTest, FastAcknowledgementsKeepTheBaseTimeout) {
  ReplicaSender s(kArea);
  const uint64_t now = AckEachAfter(s, 1'000'000);
  Transfer t;
  EXPECT_FALSE(s.NextTransfer(now + kRto - 1, kRto, &t));
  EXPECT_TRUE(s.NextTransfer(now + kRto, kRto, &t));
}

TEST(ReplicaSenderRtoTest, TheAckOfAResentTransferDoesNotTimeTheHost) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);
  const uint64_t t0 = 1'000'000'000;
  SendNext(s, 2, t0);
  s.Collected(3, Lines({3}));
  Transfer u;
  ASSERT_TRUE(s.NextTransfer(t0 + kRto, kRto, &u));
  s.Sent(u, t0 + kRto);
  // Acked 900 ms after the first send, 1 ms after the union: which one was it?
  s.OnAck(1, 3, t0 + 900'000'000);
  SendNext(s, 4, t0 + 901'000'000);
  s.Collected(5, Lines({5}));
  Transfer t;
  EXPECT_TRUE(s.NextTransfer(t0 + 901'000'000 + kRto, kRto, &t)) << "no sample was taken";
}

}  // namespace
}  // namespace dsm

// ---- silent hosts: backing off, and hosts membership marks down --------------

namespace dsm {
namespace {

// Host 1 holds version 1 and has version 2 (line 2) out since `t0`.
void OneDeltaOut(ReplicaSender& s, uint64_t t0) {
  s.Subscribe(1);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);
  SendNext(s, 2, t0);
}

TEST(ReplicaSenderBackoffTest, EachTimeoutWithoutAWordDoublesTheNextAFewTimes) {
  ReplicaSender s(kArea);
  const uint64_t t0 = 1'000'000'000;
  OneDeltaOut(s, t0);
  uint64_t at = t0;
  Transfer t;
  for (uint32_t i = 0; i < ReplicaSender::kMaxBackoffs + 3; ++i) {
    const uint64_t wait = std::min(kRto << std::min(i, ReplicaSender::kMaxBackoffs), ReplicaSender::kMaxRtoNs);
    EXPECT_FALSE(s.NextTransfer(at + wait - 1, kRto, &t)) << "timeout " << i;
    ASSERT_TRUE(s.NextTransfer(at + wait, kRto, &t)) << "timeout " << i;
    at += wait;
    s.Sent(t, at);
  }
  // The host answers (an ack of an older version, asking for frames): the
  // base timeout again.
  s.OnAck(1, 1, at + 1);
  s.Collected(3, Lines({3}));
  EXPECT_TRUE(s.NextTransfer(at + kRto, kRto, &t));
}

TEST(ReplicaSenderBackoffTest, ADownHostGetsNothingAndHoldsNothingBackThenResumesFromItsAck) {
  ReplicaSender s(kArea);
  s.Subscribe(1);
  s.Subscribe(2);
  s.Collected(1, Lines({0}));
  BringUpToDate(s, 1, 0);
  BringUpToDate(s, 2, 0);
  const uint64_t t0 = 1'000'000'000;
  s.Collected(2, Lines({2}));
  Transfer t;
  ASSERT_TRUE(s.NextTransfer(t0, kRto, &t));
  ASSERT_EQ(t.hosts, (Hosts{1, 2}));
  s.Sent(t, t0);
  s.OnAck(1, 2, t0 + 1'000'000);
  EXPECT_EQ(s.MinAcked(), 1u) << "host 2 has not acknowledged version 2";

  s.SetHostUp(2, false);
  EXPECT_TRUE(s.subscribed(2));
  EXPECT_FALSE(s.up(2));
  EXPECT_EQ(s.reachable(), 1u);
  EXPECT_EQ(s.MinAcked(), 2u) << "a down host does not hold back a writer's free";
  EXPECT_FALSE(s.AwaitingAcks(t0 + 1, kRto)) << "nor the shadow";
  s.Collected(3, Lines({3}));
  for (uint64_t at = t0 + kRto; at < t0 + 5 * ReplicaSender::kMaxRtoNs; at += kRto) {
    if (!s.NextTransfer(at, kRto, &t)) continue;
    ASSERT_EQ(t.hosts, Hosts{1}) << "a transfer to a down host";
    s.Sent(t, at);
    s.OnAck(1, t.version, at + 1);
  }
  s.SetHostUp(1, false);
  EXPECT_EQ(s.reachable(), 0u);
  EXPECT_EQ(s.MinAcked(), UINT64_MAX);

  // Back up: due at once, with all it lacks since its ack of version 1.
  s.SetHostUp(2, true);
  const uint64_t later = t0 + 10 * ReplicaSender::kMaxRtoNs;
  ASSERT_TRUE(s.NextTransfer(later, kRto, &t));
  EXPECT_EQ(t.hosts, Hosts{2});
  EXPECT_EQ(t.base, 1u);
  EXPECT_EQ(t.version, 3u);
  EXPECT_EQ(Marked(*t.lines), (std::vector<size_t>{2, 3}));
}

}  // namespace
}  // namespace dsm
