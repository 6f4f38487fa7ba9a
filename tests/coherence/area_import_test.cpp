// The rules AreaImport keeps for a replica: where frames of the next version
// go, when a version is published and with what, and when the writer's host
// hears from the replica.
#include "coherence/area_import.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/sync_params.h"
#include "coherence/version_publisher.h"
#include "tests/coherence/recording_marks.h"
#include "tests/coherence/transfer_frames.h"

namespace dsm {
namespace {

using ::dsm::testing::All;
using ::dsm::testing::Bytes;
using ::dsm::testing::Frames;
using ::dsm::testing::Lines;
using ::dsm::testing::MakeFrames;
using ::dsm::testing::RandomContent;

constexpr size_t kArea = ::dsm::testing::kTestArea;
constexpr size_t kRounded = ::dsm::testing::kTestRounded;
constexpr size_t kFrameBytes = ::dsm::testing::kTestFrameBytes;
const SyncParams kParams{};
constexpr uint64_t kT0 = 1'000'000'000;

// A replica's host: reader buffers local readers pin as a test says, a
// staging copy, and a record of publishes and acks in order.
class FakeReplicaHost : public ImportHost {
 public:
  explicit FakeReplicaHost(uint32_t buffer_count)
      : staging(kRounded, 0xee), buffers(buffer_count, Bytes(kRounded, 0)) {}

  Bytes staging;
  std::vector<Bytes> buffers;
  uint32_t latest = 0;
  uint32_t pinned = 0;  // by local readers: bit per buffer
  struct Ack {
    uint64_t complete_version;
    bool holds_nothing;
    uint64_t assembling_version;
    std::vector<wire::SeqRange> missing;
  };
  std::vector<Ack> acks;
  std::vector<uint64_t> published;  // versions
  std::vector<std::string> events;  // "ack" and "publish", in order
  size_t caught_up = 0;

  int SpareForNextVersion() override {
    return PickTargetBuffer(static_cast<uint32_t>(buffers.size()), latest, pinned);
  }
  int SpareToPublish() override { return SpareForNextVersion(); }
  int SpareBesides(int buffer) override {
    const uint32_t taken = buffer >= 0 ? 1u << buffer : 0;
    return PickTargetBuffer(static_cast<uint32_t>(buffers.size()), latest, pinned | taken);
  }
  uint32_t Latest() override { return latest; }
  uint8_t* Buffer(int b) override {
    return b < 0 ? staging.data() : buffers[static_cast<size_t>(b)].data();
  }
  void Publish(uint32_t buffer, uint64_t version, size_t, uint64_t) override {
    latest = buffer;
    published.push_back(version);
    events.push_back("publish");
  }
  void CaughtUp(size_t bytes) override { caught_up += bytes; }
  // In-place versions: offered when `in_place_capable`; the latest buffer is
  // taken only while `readers_wait` (its local readers sleep).
  bool in_place_capable = false;
  bool readers_wait = true;
  bool taken = false;
  bool InPlaceCapable() override { return in_place_capable; }
  bool BeginInPlace() override {
    taken = in_place_capable && readers_wait && (pinned & ~(1u << latest)) == pinned;
    return taken;
  }
  void EndInPlace(uint64_t version, size_t, uint64_t) override {
    EXPECT_TRUE(taken);
    taken = false;
    published.push_back(version);
    events.push_back("publish");
  }
  void SendAck(const AckReport& a) override {
    acks.push_back({a.complete_version, a.holds_nothing, a.assembling_version,
                    std::vector<wire::SeqRange>(a.missing.begin(), a.missing.end())});
    events.push_back("ack");
  }
};

// `next` is `prev` with `lines` rewritten.
Bytes Rewrite(const Bytes& prev, std::initializer_list<size_t> lines, uint8_t value) {
  Bytes next = prev;
  for (size_t l : lines) std::fill_n(next.begin() + static_cast<std::ptrdiff_t>(l * kLineBytes), kLineBytes, value);
  return next;
}

void Deliver(AreaImport& import, const Frames& frames, uint64_t now_ns) {
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(import.OnData(frames[i], now_ns), wire::DropReason::kNone) << "frame " << i;
  }
}

class AreaImportTest : public ::testing::Test {
 protected:
  explicit AreaImportTest(uint32_t buffers = 2, const SyncParams& params = kParams)
      : host_(buffers), import_(kArea, buffers, params, &host_, &counters_) {}

  // Version 5, the whole area, published into buffer 1.
  Bytes ReceiveFirstVersion() {
    Bytes v5 = RandomContent(5);
    Deliver(import_, MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes), kT0);
    EXPECT_EQ(host_.published, (std::vector<uint64_t>{5}));
    EXPECT_EQ(host_.latest, 1u);
    return v5;
  }

  FakeReplicaHost host_;
  ImportCounters counters_;
  AreaImport import_;
};

TEST_F(AreaImportTest, FramesOfTheNextVersionGoStraightIntoASpareAndArePublishedWithoutACopy) {
  const Bytes v5 = ReceiveFirstVersion();
  EXPECT_EQ(host_.buffers[1], v5);
  EXPECT_EQ(host_.staging, Bytes(kRounded, 0xee)) << "nothing was staged";
  EXPECT_EQ(counters_.versions_received, 1u);
  EXPECT_EQ(counters_.versions_received_in_place, 1u);
  // The writer's host hears of the version before the local publish: it may
  // move on while this host copies.
  EXPECT_EQ(host_.events, (std::vector<std::string>{"ack", "publish"}));
  EXPECT_EQ(host_.acks[0].complete_version, 5u);
  EXPECT_FALSE(host_.acks[0].holds_nothing);
}

TEST_F(AreaImportTest, AVersionIsMarkedAtItsFirstFrameWhenCompleteAndWhenPublished) {
  ::dsm::testing::RecordingMarks marks;
  import_.set_stage_marks(&marks);
  const Frames frames = MakeFrames(All(), RandomContent(5), 5, 0, true, 1, kFrameBytes);
  ASSERT_GT(frames.size(), 2u);
  for (size_t i = 0; i + 1 < frames.size(); ++i) import_.OnData(frames[i], kT0);
  EXPECT_EQ(marks.StagesOf(5), (std::vector<Stage>{Stage::kFirstFrame}));
  import_.OnData(frames[frames.size() - 1], kT0);
  EXPECT_EQ(marks.StagesOf(5),
            (std::vector<Stage>{Stage::kFirstFrame, Stage::kAssembled, Stage::kPublished}));
  for (const auto& m : marks.marks) EXPECT_EQ(m.peer, frames[0].header.source_host);
  EXPECT_TRUE(marks.InTimeOrder());
}

TEST(AreaImportPinTest, WhileReadersPinEverySpareFramesAreStagedAndCopiedAtThePublish) {
  FakeReplicaHost host(2);
  ImportCounters counters;
  host.pinned = 0b10;  // the only spare
  AreaImport import(kArea, 2, kParams, &host, &counters);
  const Bytes v5 = RandomContent(5);
  const Frames frames = MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes);
  for (size_t i = 0; i + 1 < frames.size(); ++i) import.OnData(frames[i], kT0);
  EXPECT_EQ(import.target(), -1);
  host.pinned = 0;  // the readers let go before the version completes
  import.OnData(frames[frames.size() - 1], kT0);
  ASSERT_EQ(host.published, (std::vector<uint64_t>{5}));
  EXPECT_EQ(host.buffers[1], v5);
  EXPECT_EQ(host.staging, v5);
  EXPECT_EQ(counters.versions_received_in_place, 0u);
}

TEST(AreaImportPinTest, APublishWaitsForAFreeSpareAndATurnRetriesIt) {
  FakeReplicaHost host(2);
  ImportCounters counters;
  host.pinned = 0b10;
  AreaImport import(kArea, 2, kParams, &host, &counters);
  const Bytes v5 = RandomContent(5);
  Deliver(import, MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes), kT0);
  EXPECT_TRUE(host.published.empty());
  EXPECT_TRUE(import.receiver().publish_pending());
  EXPECT_FALSE(import.Turn(kT0 + 1));
  EXPECT_EQ(host.acks.size(), 1u) << "acked once, at completion";
  host.pinned = 0;
  EXPECT_TRUE(import.Turn(kT0 + 2));
  EXPECT_EQ(host.published, (std::vector<uint64_t>{5}));
  EXPECT_EQ(host.buffers[1], v5);
}

// dsmd sleeps longer between versions when no replica has a timer due soon:
// one is while frames of a version may be missing (its NACK comes after a
// short quiet) and while a complete version waits for a buffer (readers do
// not wake dsmd when they free one).
TEST(AreaImportPinTest, APromptTimerIsAwaitedOnlyWhileAssemblingOrWaitingToPublish) {
  FakeReplicaHost host(2);
  ImportCounters counters;
  AreaImport import(kArea, 2, kParams, &host, &counters);
  EXPECT_FALSE(import.AwaitsPromptTimer()) << "nothing assembled yet";
  const Bytes v5 = RandomContent(5);
  const Frames frames = MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes);
  ASSERT_GE(frames.size(), 2u);
  import.OnData(frames[0], kT0);
  EXPECT_TRUE(import.AwaitsPromptTimer()) << "frames of version 5 may be missing";
  for (size_t i = 1; i < frames.size(); ++i) import.OnData(frames[i], kT0);
  ASSERT_EQ(host.published, (std::vector<uint64_t>{5}));
  EXPECT_FALSE(import.AwaitsPromptTimer()) << "published: nothing is due soon";

  // Version 6 completes while local readers pin the only spare.
  host.pinned = 0b01;
  import.Turn(kT0 + 1);
  ASSERT_EQ(import.target(), -1);
  const Bytes v6 = Rewrite(v5, {10}, 0x66);
  Deliver(import, MakeFrames(Lines({10}), v6, 6, 5, false, 2, kFrameBytes), kT0 + 2);
  ASSERT_TRUE(import.receiver().publish_pending());
  EXPECT_TRUE(import.AwaitsPromptTimer()) << "the publish waits for a buffer";
  host.pinned = 0;
  EXPECT_TRUE(import.Turn(kT0 + 3));
  EXPECT_EQ(host.published, (std::vector<uint64_t>{5, 6}));
  EXPECT_FALSE(import.AwaitsPromptTimer());
}

TEST_F(AreaImportTest, TheLatestBufferNeverChangesBetweenPublishesAndTheNextIsExact) {
  const Bytes v5 = ReceiveFirstVersion();
  const Bytes v6 = Rewrite(v5, {0, 500, 1000}, 0x66);
  const Frames frames = MakeFrames(Lines({0, 500, 1000}), v6, 6, 5, false, 2, kFrameBytes);
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    EXPECT_EQ(import_.OnData(frames[i], kT0 + 1), wire::DropReason::kNone);
    EXPECT_EQ(host_.buffers[1], v5) << "the latest buffer changed under local readers";
  }
  import_.OnData(frames[frames.size() - 1], kT0 + 1);
  ASSERT_EQ(host_.published, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(host_.latest, 0u);
  // Buffer 0 missed version 5 altogether: the publish brought it up to date.
  EXPECT_EQ(host_.buffers[0], v6);
}

TEST_F(AreaImportTest, ASpareThatMissedFewLinesIsCaughtUpWhenATurnAimsAtIt) {
  const Bytes v5 = ReceiveFirstVersion();
  const Bytes v6 = Rewrite(v5, {10}, 0x66);
  Deliver(import_, MakeFrames(Lines({10}), v6, 6, 5, false, 2, kFrameBytes), kT0 + 1);
  ASSERT_EQ(host_.latest, 0u);
  // Buffer 1 lacks line 10 of version 6: a turn between versions copies it
  // now, not when version 7 completes.
  EXPECT_EQ(import_.target(), -1);
  import_.Turn(kT0 + 2);
  EXPECT_EQ(import_.target(), 1);
  EXPECT_EQ(host_.caught_up, kLineBytes);
  EXPECT_EQ(host_.buffers[1], v6);
}

// Readers that still hold the only spare after a publish do not wake dsmd:
// the replica says it awaits the spare, for spare_await_ns, so that a turn
// comes soon and catches the spare up between versions.
TEST_F(AreaImportTest, AfterAPublishItAwaitsTheSpareReadersHoldForABoundedTime) {
  const Bytes v5 = ReceiveFirstVersion();
  EXPECT_TRUE(import_.AwaitsSpare(kT0));  // a turn has not aimed yet
  import_.Turn(kT0 + 1);
  EXPECT_EQ(import_.target(), 0);
  EXPECT_FALSE(import_.AwaitsSpare(kT0 + 1));
  host_.pinned = 1u << 1;  // readers of version 5 (buffer 1) stay there
  const Bytes v6 = Rewrite(v5, {10}, 0x66);
  Deliver(import_, MakeFrames(Lines({10}), v6, 6, 5, false, 2, kFrameBytes), kT0 + 10);
  ASSERT_EQ(host_.latest, 0u);
  ASSERT_EQ(import_.target(), -1);
  EXPECT_TRUE(import_.AwaitsSpare(kT0 + 10));
  import_.Turn(kT0 + 20);  // buffer 1 is still pinned
  EXPECT_EQ(import_.target(), -1);
  EXPECT_TRUE(import_.AwaitsSpare(kT0 + 20));
  host_.pinned = 0;  // the readers moved to version 6
  import_.Turn(kT0 + 30);
  EXPECT_EQ(import_.target(), 1);
  EXPECT_EQ(host_.buffers[1], v6);  // caught up between versions
  EXPECT_FALSE(import_.AwaitsSpare(kT0 + 30));

  // Readers that stay on a buffer are waited for only spare_await_ns.
  host_.pinned = 1u << 0;
  const Bytes v7 = Rewrite(v6, {11}, 0x77);
  Deliver(import_, MakeFrames(Lines({11}), v7, 7, 6, false, 3, kFrameBytes), kT0 + 40);
  ASSERT_EQ(host_.latest, 1u);
  EXPECT_TRUE(import_.AwaitsSpare(kT0 + 40 + kParams.spare_await_ns - 1));
  EXPECT_FALSE(import_.AwaitsSpare(kT0 + 40 + kParams.spare_await_ns));
}

class AreaImportThreeBuffersTest : public AreaImportTest {
 protected:
  AreaImportThreeBuffersTest() : AreaImportTest(3) {}

  // Delivers version `v` rewriting `line` of `prev`, after a turn between
  // versions (the catch-up ahead). Returns the version and the bytes that
  // turn caught up.
  std::pair<Bytes, size_t> Next(const Bytes& prev, uint64_t v, size_t line) {
    const size_t before = host_.caught_up;
    import_.Turn(kT0 + v);
    const size_t caught_up = host_.caught_up - before;
    const Bytes next = Rewrite(prev, {line}, static_cast<uint8_t>(v));
    Deliver(import_,
            MakeFrames(Lines({line}), next, v, v - 1, false, static_cast<uint32_t>(v), kFrameBytes),
            kT0 + v);
    EXPECT_EQ(host_.published.back(), v);
    EXPECT_EQ(host_.buffers[host_.latest], next) << "version " << v;
    return {next, caught_up};
  }
};

TEST_F(AreaImportThreeBuffersTest, FramesAlsoWriteTheNextSpareWhichThenMissesOnlyOneVersion) {
  Bytes v = ReceiveFirstVersion();  // version 5
  v = Next(v, 6, 10).first;
  v = Next(v, 7, 20).first;  // the spare after it had missed every line but 10 of version 5
  // From here on each spare lacks only the version before the one it gets:
  // the version before that came with its frames.
  for (uint64_t version = 8; version <= 12; ++version) {
    const auto [next, caught_up] = Next(v, version, 10 * version);
    EXPECT_EQ(caught_up, kLineBytes) << "version " << version;
    v = next;
  }
  EXPECT_EQ(counters_.versions_received_forward, counters_.versions_received);
  // Every buffer differs from the latest only where its publisher says so.
  for (uint32_t b = 0; b < 3; ++b) {
    for (size_t line = 0; line < kArea / kLineBytes; ++line) {
      if (std::memcmp(host_.buffers[b].data() + line * kLineBytes, v.data() + line * kLineBytes,
                      kLineBytes) != 0) {
        EXPECT_TRUE(import_.publisher().pending(b).Test(line))
            << "buffer " << b << " line " << line;
      }
    }
  }
}

TEST_F(AreaImportThreeBuffersTest, ASpareLocalReadersPinIsNotWrittenForward) {
  Bytes v = ReceiveFirstVersion();
  v = Next(v, 6, 10).first;
  v = Next(v, 7, 20).first;
  import_.Turn(kT0 + 8);  // aims at the spare after the latest
  const int target = import_.target();
  ASSERT_GE(target, 0);
  const uint32_t other = 3 - host_.latest - static_cast<uint32_t>(target);
  host_.pinned = 1u << other;  // a reader still holds the version it had
  const Bytes held = host_.buffers[other];
  const uint64_t forwarded = counters_.versions_received_forward;
  v = Next(v, 8, 30).first;
  EXPECT_EQ(host_.buffers[other], held) << "a pinned buffer changed";
  EXPECT_EQ(counters_.versions_received_forward, forwarded);
  host_.pinned = 0;
  // That spare now lacks two versions, as without forward copies, and gets them.
  const auto [next, caught_up] = Next(v, 9, 40);
  EXPECT_EQ(caught_up, 2 * kLineBytes);
  EXPECT_EQ(host_.buffers[host_.latest], next);
}

TEST_F(AreaImportTest, FramesItCannotUseAreAckedAtMostOncePerGap) {
  const Bytes v5 = ReceiveFirstVersion();
  const Frames again = MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes);
  ASSERT_EQ(host_.acks.size(), 1u);
  // Version 5 again: the sender did not hear the ack. One per gap is enough.
  EXPECT_EQ(import_.OnData(again[0], kT0 + 1), wire::DropReason::kStaleVersion);
  EXPECT_EQ(import_.OnData(again[1], kT0 + kParams.ack_min_gap_ns - 1),
            wire::DropReason::kStaleVersion);
  EXPECT_EQ(host_.acks.size(), 1u);
  import_.OnData(again[2], kT0 + kParams.ack_min_gap_ns);
  ASSERT_EQ(host_.acks.size(), 2u);
  EXPECT_EQ(host_.acks[1].complete_version, 5u);
}

TEST_F(AreaImportTest, ATransferThatStopsComingIsNackedWithWhatItLacksAfterTheQuiet) {
  const Bytes v5 = RandomContent(5);
  const Frames frames = MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes);
  const size_t last = frames.size() - 1;  // its last frame does not come either
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i != 2 && i != 5 && i != 6 && i != last) import_.OnData(frames[i], kT0);
  }
  EXPECT_FALSE(import_.Turn(kT0 + kParams.nack_after_ns));
  EXPECT_TRUE(host_.acks.empty());
  EXPECT_TRUE(import_.Turn(kT0 + kParams.nack_after_ns + 1));
  ASSERT_EQ(host_.acks.size(), 1u);
  const FakeReplicaHost::Ack& nack = host_.acks[0];
  EXPECT_TRUE(nack.holds_nothing) << "no version yet: not an ack of version 0";
  EXPECT_EQ(nack.assembling_version, 5u);
  ASSERT_EQ(nack.missing.size(), 3u);
  EXPECT_EQ(nack.missing[0].first, 2u);
  EXPECT_EQ(nack.missing[0].count, 1u);
  EXPECT_EQ(nack.missing[1].first, 5u);
  EXPECT_EQ(nack.missing[1].count, 2u);
  EXPECT_EQ(nack.missing[2].first, last);
  // Not again until another quiet period.
  EXPECT_FALSE(import_.Turn(kT0 + kParams.nack_after_ns + 2));
  EXPECT_TRUE(import_.Turn(kT0 + 2 * kParams.nack_after_ns + 2));
  EXPECT_EQ(host_.acks.size(), 2u);
  for (size_t i : {size_t{2}, size_t{5}, size_t{6}, last}) {
    import_.OnData(frames[i], kT0 + 3 * kParams.nack_after_ns);
  }
  EXPECT_EQ(host_.published, (std::vector<uint64_t>{5}));
  EXPECT_EQ(host_.buffers[1], v5);
}

// Frames of a transfer arrive in the order they were sent, and resends in
// ascending order: once the last frame of a pass came (the transfer's last,
// or the last one a NACK asked for), what is missing before it was lost, and
// is asked for after a short quiet (nack_after_tail_ns). When that last frame
// is lost too, the full quiet (nack_after_ns) decides.
TEST_F(AreaImportTest, GapsBeforeThePassesLastFrameAreNackedAfterAShortQuiet) {
  const Bytes v5 = RandomContent(5);
  const Frames frames = MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes);
  const uint64_t tail = kParams.nack_after_tail_ns;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i != 3 && i != 7) import_.OnData(frames[i], kT0);
  }
  EXPECT_FALSE(import_.Turn(kT0 + tail));
  EXPECT_TRUE(import_.Turn(kT0 + tail + 1));
  ASSERT_EQ(host_.acks.size(), 1u);
  ASSERT_EQ(host_.acks[0].missing.size(), 2u);
  EXPECT_EQ(host_.acks[0].missing[0].first, 3u);
  EXPECT_EQ(host_.acks[0].missing[1].first, 7u);
  // Of the resends, 3 is lost again and 7 (the pass's last) comes.
  const uint64_t t1 = kT0 + 2 * tail;
  import_.OnData(frames[7], t1);
  EXPECT_FALSE(import_.Turn(t1 + tail));
  EXPECT_TRUE(import_.Turn(t1 + tail + 1));
  ASSERT_EQ(host_.acks.size(), 2u);
  ASSERT_EQ(host_.acks[1].missing.size(), 1u);
  EXPECT_EQ(host_.acks[1].missing[0].first, 3u);
  // Lost once more, and it was the pass's last: the full quiet decides.
  EXPECT_FALSE(import_.Turn(t1 + kParams.nack_after_ns));
  EXPECT_TRUE(import_.Turn(t1 + tail + kParams.nack_after_ns + 2));
  EXPECT_EQ(host_.acks.size(), 3u);
  import_.OnData(frames[3], t1 + 2 * kParams.nack_after_ns);
  EXPECT_EQ(host_.published, (std::vector<uint64_t>{5}));
  EXPECT_EQ(host_.buffers[1], v5);
}

// Every range a transfer lacks is asked for after the quiet, as many ACK
// frames as it takes: a NACK of one frame's worth (wire::kMaxMissingRanges)
// per quiet period made a big version at a few percent loss take dozens of
// periods to complete.
TEST(AreaImportNackTest, ANackListsEveryMissingRangeInAsManyAcksAsItTakes) {
  for (const uint32_t max_ranges : {1024u, 100u}) {
    SCOPED_TRACE("nack_max_ranges " + std::to_string(max_ranges));
    SyncParams params;
    params.nack_max_ranges = max_ranges;
    FakeReplicaHost host(2);
    ImportCounters counters;
    AreaImport import(kArea, 2, params, &host, &counters);
    const Bytes v5 = RandomContent(5);
    // One line per frame; every other frame is lost.
    const Frames frames =
        MakeFrames(All(), v5, 5, 0, true, 1, wire::DataFrameWriter::kMinFrameBytes);
    ASSERT_GT(frames.size(), 2 * wire::kMaxMissingRanges + 2);
    for (size_t i = 1; i < frames.size(); i += 2) import.OnData(frames[i], kT0);
    const size_t lost = (frames.size() + 1) / 2;
    const size_t asked = std::min<size_t>(lost, max_ranges);
    ASSERT_TRUE(import.Turn(kT0 + params.nack_after_ns + 1));
    ASSERT_EQ(host.acks.size(), (asked + wire::kMaxMissingRanges - 1) / wire::kMaxMissingRanges);
    std::vector<uint32_t> seqs;
    for (const FakeReplicaHost::Ack& ack : host.acks) {
      EXPECT_TRUE(ack.holds_nothing);
      EXPECT_EQ(ack.assembling_version, 5u);
      EXPECT_LE(ack.missing.size(), wire::kMaxMissingRanges);
      for (const wire::SeqRange& r : ack.missing) {
        EXPECT_EQ(r.count, 1u);
        seqs.push_back(r.first);
      }
    }
    ASSERT_EQ(seqs.size(), asked);
    for (size_t k = 0; k < asked; ++k) EXPECT_EQ(seqs[k], 2 * k) << "range " << k;
    EXPECT_EQ(counters.acks_out, host.acks.size());
  }
}

// One forged frame claiming a far newer version (within what the version
// limit lets through) would make every genuine frame look stale for good.
// A replica that accepts nothing while the writer's host lists another
// version starts over from the whole area after resync_after_ns.
TEST_F(AreaImportTest, AReplicaStuckBehindAForgedVersionResyncsFromTheWholeArea) {
  const Bytes v5 = ReceiveFirstVersion();
  const uint64_t wait = kParams.resync_after_ns;
  // The forged frame: one of two frames of a delta to "version 900".
  const Bytes forged = Rewrite(v5, {7}, 0xf0);
  const Frames bogus = MakeFrames(Lines({7, 900}), forged, 900, 5, false, 99,
                                  wire::DataFrameWriter::kMinFrameBytes);
  ASSERT_EQ(bogus.size(), 2u);
  EXPECT_EQ(import_.OnData(bogus[0], kT0 + 1), wire::DropReason::kNone);
  // The genuine version 6 is refused as stale, again and again.
  const Bytes v6 = Rewrite(v5, {3, 400}, 0x66);
  const Frames genuine = MakeFrames(Lines({3, 400}), v6, 6, 5, false, 2, kFrameBytes);
  uint64_t t = kT0 + 2;
  for (; t < kT0 + wait; t += wait / 8) {
    import_.OnWriterLatest(6, t);
    for (size_t i = 0; i < genuine.size(); ++i) {
      EXPECT_EQ(import_.OnData(genuine[i], t), wire::DropReason::kStaleVersion);
    }
    import_.Turn(t);
  }
  EXPECT_EQ(counters_.resyncs, 0u) << "not before resync_after_ns";
  const size_t acks_before = host_.acks.size();
  // A whole bound since the listing first came (kT0 + 2) with nothing accepted.
  import_.OnWriterLatest(6, kT0 + wait + 3);
  EXPECT_TRUE(import_.Turn(kT0 + wait + 3));
  EXPECT_EQ(counters_.resyncs, 1u);
  ASSERT_GT(host_.acks.size(), acks_before);
  EXPECT_TRUE(host_.acks.back().holds_nothing) << "asks for the whole area";
  EXPECT_FALSE(import_.receiver().has_base());
  // The writer's host sends the whole area at version 6: published, exact.
  Deliver(import_, MakeFrames(All(), v6, 6, 0, true, 3, kFrameBytes), kT0 + wait + 4);
  EXPECT_EQ(host_.published, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(host_.buffers[host_.latest], v6);
}

// When the writer pauses, a lost ACK of its last version would be found
// only by the sender's retransmission timeout: a replica that completed a
// version and then hears nothing repeats its ACK a few times, at growing gaps.
TEST_F(AreaImportTest, AQuietReplicaRepeatsItsLastAckAFewTimesAtGrowingGaps) {
  ReceiveFirstVersion();  // its ACK at kT0
  const size_t acks = host_.acks.size();
  const uint64_t gap = kParams.reack_after_ns;
  ASSERT_EQ(kParams.idle_reacks, 3u);
  EXPECT_FALSE(import_.Turn(kT0 + gap));
  uint64_t at = kT0 + gap + 1;
  for (uint32_t k = 0; k < 3; ++k) {
    SCOPED_TRACE(::testing::Message() << "repeat " << k);
    EXPECT_TRUE(import_.Turn(at));
    ASSERT_EQ(host_.acks.size(), acks + k + 1);
    EXPECT_EQ(host_.acks.back().complete_version, 5u);
    EXPECT_TRUE(host_.acks.back().missing.empty());
    EXPECT_FALSE(import_.Turn(at + (gap << (k + 1)))) << "the next one waits twice as long";
    at += (gap << (k + 1)) + 1;
  }
  EXPECT_FALSE(import_.Turn(at + 100 * gap)) << "three repeats, then the sender's timeout";
  EXPECT_EQ(host_.acks.size(), acks + 3);
  // A new completion starts the repeats again.
  const uint64_t t6 = at + 100 * gap;
  Deliver(import_, MakeFrames(Lines({3}), RandomContent(6), 6, 5, false, 2, kFrameBytes), t6);
  ASSERT_EQ(host_.published.back(), 6u);
  const size_t acks6 = host_.acks.size();
  EXPECT_TRUE(import_.Turn(t6 + gap + 1));
  ASSERT_EQ(host_.acks.size(), acks6 + 1);
  EXPECT_EQ(host_.acks.back().complete_version, 6u);
}

SyncParams WithoutIdleReacks() {
  SyncParams p;
  p.idle_reacks = 0;
  return p;
}

class AreaImportBehindTest : public AreaImportTest {
 protected:
  AreaImportBehindTest() : AreaImportTest(2, WithoutIdleReacks()) {}
};

// A lost ACK of the last completion would hold the writer's next version
// back for its whole retransmission timeout: a replica the writer's host
// lists as behind, assembling nothing, says where it is again (however
// often; the repeats after a completion are off here).
TEST_F(AreaImportBehindTest, AReplicaListedAsBehindRepeatsItsAckWhenNothingComes) {
  ReceiveFirstVersion();
  const size_t acks = host_.acks.size();
  const uint64_t gap = kParams.reack_after_ns;
  import_.OnWriterLatest(5, kT0 + 1);
  EXPECT_FALSE(import_.Turn(kT0 + 2 * gap)) << "not behind: nothing to say";
  import_.OnWriterLatest(8, kT0 + 2 * gap);
  EXPECT_TRUE(import_.Turn(kT0 + 2 * gap + 1));
  ASSERT_EQ(host_.acks.size(), acks + 1);
  EXPECT_EQ(host_.acks.back().complete_version, 5u);
  EXPECT_FALSE(host_.acks.back().holds_nothing);
  EXPECT_FALSE(import_.Turn(kT0 + 3 * gap)) << "once per reack_after_ns";
  EXPECT_TRUE(import_.Turn(kT0 + 3 * gap + 2));
  EXPECT_EQ(host_.acks.size(), acks + 2);
  EXPECT_EQ(counters_.resyncs, 0u);
}

// Not stuck: a replica waiting for local readers to free a buffer, a slow
// transfer that keeps accepting frames, and one whose writer's host was not
// heard for a while (the stall clock starts when it is heard again).
TEST(AreaImportResyncTest, WaitingForReadersSlowTransfersAndSilencesAreNotStalls) {
  const uint64_t wait = kParams.resync_after_ns;
  {
    FakeReplicaHost host(2);
    ImportCounters counters;
    host.pinned = 0b10;  // readers hold the only spare
    AreaImport import(kArea, 2, kParams, &host, &counters);
    Deliver(import, MakeFrames(All(), RandomContent(5), 5, 0, true, 1, kFrameBytes), kT0);
    ASSERT_TRUE(import.receiver().publish_pending());
    for (uint64_t t = kT0; t <= kT0 + 3 * wait; t += wait / 4) {
      import.OnWriterLatest(9, t);
      import.Turn(t);
    }
    EXPECT_EQ(counters.resyncs, 0u) << "waiting for readers";
  }
  {
    FakeReplicaHost host(2);
    ImportCounters counters;
    AreaImport import(kArea, 2, kParams, &host, &counters);
    const Bytes v5 = RandomContent(5);
    const Frames frames = MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes);
    uint64_t t = kT0;
    for (size_t i = 0; i < frames.size(); ++i, t += wait / 2) {
      import.OnWriterLatest(5, t);
      import.Turn(t);
      import.OnData(frames[i], t);
    }
    EXPECT_EQ(counters.resyncs, 0u) << "a frame every half bound is progress";
    EXPECT_EQ(host.published, (std::vector<uint64_t>{5}));
  }
  {
    FakeReplicaHost host(2);
    ImportCounters counters;
    AreaImport import(kArea, 2, kParams, &host, &counters);
    import.Turn(kT0);
    import.OnWriterLatest(5, kT0);
    import.Turn(kT0 + wait / 8);
    // Nothing heard for 3 bounds (a cut), then a listing: not stuck yet.
    import.OnWriterLatest(5, kT0 + 3 * wait);
    EXPECT_FALSE(import.Turn(kT0 + 3 * wait + 1));
    EXPECT_EQ(counters.resyncs, 0u);
    for (uint64_t t = kT0 + 3 * wait; t <= kT0 + 4 * wait; t += wait / 8) {
      import.OnWriterLatest(5, t);
      import.Turn(t);
    }
    EXPECT_EQ(counters.resyncs, 0u);
    import.OnWriterLatest(5, kT0 + 4 * wait + 2);
    import.Turn(kT0 + 4 * wait + 2);
    EXPECT_EQ(counters.resyncs, 1u) << "a whole bound heard without a frame";
  }
}

// In-place versions (ImportHost::InPlaceCapable): a version's lines are held
// until it is complete, then written into the latest buffer while its local
// readers wait, or into a spare with what that buffer lacks.
class AreaImportInPlaceTest : public ::testing::Test {
 protected:
  explicit AreaImportInPlaceTest(uint32_t buffers = 2, const SyncParams& params = kParams)
      : host_(Capable(buffers)), import_(kArea, buffers, params, &host_, &counters_) {}
  static FakeReplicaHost Capable(uint32_t buffers) {
    FakeReplicaHost h(buffers);
    h.in_place_capable = true;
    return h;
  }

  FakeReplicaHost host_;
  ImportCounters counters_;
  AreaImport import_;
};

TEST_F(AreaImportInPlaceTest, AHeldVersionGoesIntoTheLatestBufferInOneWriteAtItsEnd) {
  const Bytes v5 = RandomContent(5);
  Deliver(import_, MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes), kT0);
  ASSERT_EQ(host_.published, (std::vector<uint64_t>{5}));
  EXPECT_EQ(host_.latest, 0u) << "written in place";
  EXPECT_EQ(host_.buffers[0], v5);
  const Bytes v6 = Rewrite(v5, {0, 500, 1000}, 0x66);
  const Frames frames = MakeFrames(Lines({0, 500, 1000}), v6, 6, 5, false, 2, kFrameBytes);
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    EXPECT_EQ(import_.OnData(frames[i], kT0 + 1), wire::DropReason::kNone);
    EXPECT_EQ(host_.buffers[0], v5) << "written before the version was complete";
    EXPECT_EQ(host_.buffers[1], Bytes(kRounded, 0)) << "a spare written";
  }
  import_.OnData(frames[frames.size() - 1], kT0 + 1);
  ASSERT_EQ(host_.published, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(host_.latest, 0u);
  EXPECT_EQ(host_.buffers[0], v6);
  EXPECT_EQ(host_.buffers[1], Bytes(kRounded, 0));
  EXPECT_EQ(counters_.versions_written_in_place, 2u);
  EXPECT_EQ(host_.events, (std::vector<std::string>{"ack", "publish", "ack", "publish"}));
}

// Readers that wait and readers that are busy, in random turns: every
// published buffer holds exactly its version, whichever way each went.
TEST_F(AreaImportInPlaceTest, InPlaceAndSparePublishesInAnyOrderLeaveEveryVersionExact) {
  std::mt19937_64 rng(3);
  Bytes v = RandomContent(5);
  Deliver(import_, MakeFrames(All(), v, 5, 0, true, 1, kFrameBytes), kT0);
  size_t in_place = 1, to_spare = 0;
  for (uint64_t version = 6; version < 200; ++version) {
    host_.readers_wait = rng() % 3 != 0;
    std::vector<size_t> changed;
    for (int i = 0; i < 1 + static_cast<int>(rng() % 40); ++i) changed.push_back(rng() % 1001);
    LineSet lines(kArea);
    Bytes next = v;
    for (size_t l : changed) {
      lines.AddLines(l, 1);
      for (size_t b = 0; b < kLineBytes && l * kLineBytes + b < kArea; ++b) {
        next[l * kLineBytes + b] = static_cast<uint8_t>(rng());
      }
    }
    Deliver(import_,
            MakeFrames(lines, next, version, version - 1, false, static_cast<uint32_t>(version),
                       kFrameBytes),
            kT0 + version);
    ASSERT_EQ(host_.published.back(), version);
    ASSERT_EQ(host_.buffers[host_.latest], next) << "version " << version;
    (host_.readers_wait ? in_place : to_spare)++;
    v = next;
  }
  EXPECT_EQ(counters_.versions_written_in_place, in_place);
  EXPECT_GT(to_spare, 20u);
}

TEST_F(AreaImportInPlaceTest, AReplacedTransferLeavesNothingOfItsHeldLines) {
  const Bytes v5 = RandomContent(5);
  Deliver(import_, MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes), kT0);
  // Version 6 (lines 10..29) is cut short; the union 5 -> 7 replaces it and
  // carries only lines 10..19 (20..29 went back to what version 5 had).
  LineSet six(kArea), seven(kArea);
  six.AddLines(10, 20);
  seven.AddLines(10, 10);
  Bytes v6 = v5, v7 = v5;
  std::fill_n(v6.begin() + 10 * kLineBytes, 20 * kLineBytes, 0x66);
  std::fill_n(v7.begin() + 10 * kLineBytes, 10 * kLineBytes, 0x77);
  const Frames f6 = MakeFrames(six, v6, 6, 5, false, 2, kFrameBytes);
  ASSERT_GT(f6.size(), 2u);
  for (size_t i = 0; i + 1 < f6.size(); ++i) import_.OnData(f6[i], kT0 + 1);
  Deliver(import_, MakeFrames(seven, v7, 7, 5, false, 3, kFrameBytes), kT0 + 2);
  ASSERT_EQ(host_.published, (std::vector<uint64_t>{5, 7}));
  EXPECT_EQ(host_.buffers[host_.latest], v7);
}

// Replicas that hold at most 48 lines of a version.
SyncParams HoldingFewLines() {
  SyncParams p;
  p.hold_max_bytes = 48 * kLineBytes;
  return p;
}
class AreaImportHoldLimitTest : public AreaImportInPlaceTest {
 protected:
  AreaImportHoldLimitTest() : AreaImportInPlaceTest(2, HoldingFewLines()) {}
  FakeReplicaHost& host = host_;
  ImportCounters& counters = counters_;
  AreaImport& import = import_;
};

TEST_F(AreaImportHoldLimitTest, AVersionLargerThanTheHoldLimitGoesStraightIntoASpare) {
  const Bytes v5 = RandomContent(5);
  const Frames frames = MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes);
  import.OnData(frames[0], kT0);
  EXPECT_FALSE(import.receiver().holding()) << "judged by its first frame";
  EXPECT_EQ(import.target(), 1);
  for (size_t i = 1; i < frames.size(); ++i) import.OnData(frames[i], kT0);
  ASSERT_EQ(host.published, (std::vector<uint64_t>{5}));
  EXPECT_EQ(host.latest, 1u);
  EXPECT_EQ(host.buffers[1], v5);
  EXPECT_EQ(counters.versions_received_in_place, 1u);
  EXPECT_EQ(counters.versions_written_in_place, 0u);
  // A small one is held again, and goes in place.
  const Bytes v6 = Rewrite(v5, {7}, 0x66);
  Deliver(import, MakeFrames(Lines({7}), v6, 6, 5, false, 2, kFrameBytes), kT0 + 1);
  EXPECT_EQ(host.latest, 1u);
  EXPECT_EQ(host.buffers[1], v6);
  EXPECT_EQ(counters.versions_written_in_place, 1u);
}

TEST_F(AreaImportHoldLimitTest, AHeldVersionThatOutgrowsTheLimitSpillsIntoASpare) {
  const Bytes v5 = RandomContent(5);
  Deliver(import, MakeFrames(All(), v5, 5, 0, true, 1, kFrameBytes), kT0);
  ASSERT_EQ(host.latest, 1u);
  // 60 lines in frames of 8: the last frame (4 lines) comes first, so the
  // transfer looks like 8 x 4 lines, and is held until it outgrows 48.
  LineSet lines(kArea);
  lines.AddLines(100, 60);
  Bytes v6 = v5;
  std::fill_n(v6.begin() + 100 * kLineBytes, 60 * kLineBytes, 0x66);
  const Frames frames = MakeFrames(lines, v6, 6, 5, false, 2, kFrameBytes);
  ASSERT_EQ(frames.size(), 8u);
  import.OnData(frames[7], kT0 + 1);
  EXPECT_TRUE(import.receiver().holding());
  for (size_t i = 0; i < 5; ++i) import.OnData(frames[i], kT0 + 1);
  EXPECT_TRUE(import.receiver().holding()) << "44 lines held";
  import.OnData(frames[5], kT0 + 1);
  EXPECT_FALSE(import.receiver().holding()) << "52 lines";
  EXPECT_EQ(import.target(), 0);
  EXPECT_EQ(host.buffers[1], v5) << "the latest buffer changed";
  import.OnData(frames[6], kT0 + 1);
  ASSERT_EQ(host.published, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(counters.versions_received_in_place, 2u);
  EXPECT_EQ(host.latest, 0u);
  EXPECT_EQ(host.buffers[0], v6);
  EXPECT_EQ(counters.versions_written_in_place, 0u);
}

}  // namespace
}  // namespace dsm
