#include "coherence/replica_receiver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <random>
#include <vector>

#include "coherence/wire_format.h"
#include "tests/coherence/transfer_frames.h"

namespace dsm::wire {
// Internal linkage: wire_format_test.cpp defines its own, with external linkage.
static std::ostream& operator<<(std::ostream& os, DropReason r) { return os << DropReasonName(r); }
}  // namespace dsm::wire

namespace dsm {
namespace {

using wire::DropReason;
using Bytes = std::vector<uint8_t>;

constexpr size_t kArea = ::dsm::testing::kTestArea;
constexpr size_t kLines = ::dsm::testing::kTestLines;
constexpr size_t kRounded = ::dsm::testing::kTestRounded;
constexpr size_t kFrameBytes = ::dsm::testing::kTestFrameBytes;

using ::dsm::testing::All;
using ::dsm::testing::Frames;
using ::dsm::testing::Lines;
using ::dsm::testing::MakeFrames;
using ::dsm::testing::RandomContent;

// `from` with `lines` given new random content.
Bytes Changed(const Bytes& from, const LineSet& lines, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b = from;
  lines.ForEachRun([&](size_t first, size_t count) {
    for (size_t i = first * kLineBytes; i < (first + count) * kLineBytes && i < kArea; ++i) {
      b[i] = static_cast<uint8_t>(rng());
    }
  });
  return b;
}

std::vector<std::pair<uint32_t, uint32_t>> Missing(const ReplicaReceiver& r, size_t max = 64) {
  std::vector<wire::SeqRange> out(max);
  const size_t n = r.MissingRanges(out.data(), max);
  std::vector<std::pair<uint32_t, uint32_t>> v;
  for (size_t i = 0; i < n; ++i) v.emplace_back(uint32_t{out[i].first}, uint32_t{out[i].count});
  return v;
}
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

class ReplicaReceiverTest : public ::testing::Test {
 protected:
  ReplicaReceiverTest() : staging_(kRounded, 0xee), rx_(kArea, staging_.data()) {}

  // Applies every frame in seq order; the last one completes the transfer.
  void ApplyAll(const Frames& frames, uint64_t now = 0) {
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto r = rx_.OnData(frames[i], now);
      ASSERT_EQ(r.drop, DropReason::kNone) << "seq " << i;
      ASSERT_EQ(r.completed, i + 1 == frames.size()) << "seq " << i;
    }
  }
  // Full transfer of `content` at `version`, completed and published.
  void Establish(const Bytes& content, uint64_t version, uint32_t id) {
    ApplyAll(MakeFrames(All(), content, version, 0, true, id));
    ASSERT_EQ(rx_.complete_version(), version);
    rx_.Published();
  }
  bool StagingEquals(const Bytes& content) const {
    return std::memcmp(staging_.data(), content.data(), kRounded) == 0;
  }

  Bytes staging_;
  ReplicaReceiver rx_;
};

TEST_F(ReplicaReceiverTest, AFullTransferCompletesAndTheStagingCopyEqualsTheSource) {
  const Bytes src = RandomContent(1);
  const Frames frames = MakeFrames(All(), src, 9, 0, true, 77);
  ASSERT_EQ(frames.size(), 126u);
  EXPECT_FALSE(rx_.has_base());
  EXPECT_FALSE(rx_.assembling());
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    const auto r = rx_.OnData(frames[i], 1000 + i);
    ASSERT_EQ(r.drop, DropReason::kNone);
    ASSERT_FALSE(r.completed);
    ASSERT_FALSE(r.ack_now);
    ASSERT_TRUE(rx_.assembling());
    ASSERT_EQ(rx_.assembling_version(), 9u);
    ASSERT_EQ(rx_.assembling_transfer(), 77u);
  }
  EXPECT_EQ(rx_.last_frame_ns(), 1000u + frames.size() - 2);
  const auto r = rx_.OnData(frames[frames.size() - 1], 5000);
  EXPECT_EQ(r.drop, DropReason::kNone);
  EXPECT_TRUE(r.completed);
  EXPECT_TRUE(r.ack_now);
  EXPECT_TRUE(rx_.has_base());
  EXPECT_EQ(rx_.complete_version(), 9u);
  EXPECT_TRUE(rx_.publish_pending());
  EXPECT_FALSE(rx_.assembling());
  EXPECT_EQ(rx_.assembling_version(), 0u);
  EXPECT_EQ(rx_.assembling_transfer(), 0u);
  EXPECT_EQ(rx_.changed().CountLines(), kLines);
  EXPECT_TRUE(StagingEquals(src));
  EXPECT_TRUE(Missing(rx_).empty());
  rx_.Published();
  EXPECT_FALSE(rx_.publish_pending());
  EXPECT_TRUE(rx_.changed().Empty());
}

TEST_F(ReplicaReceiverTest, FramesInAnyOrder) {
  const Bytes src = RandomContent(2);
  const Frames frames = MakeFrames(All(), src, 3, 0, true, 1);
  std::vector<size_t> order(frames.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  for (size_t k = 0; k < order.size(); ++k) {
    const auto r = rx_.OnData(frames[order[k]], k);
    ASSERT_EQ(r.drop, DropReason::kNone);
    ASSERT_EQ(r.completed, k + 1 == order.size());
  }
  EXPECT_TRUE(StagingEquals(src));

  // Then a delta in reverse order.
  rx_.Published();
  const LineSet delta = Lines({0, 1, 2, 100, 500, 501, 999, 1000});
  const Bytes next = Changed(src, delta, 3);
  const Frames d = MakeFrames(delta, next, 4, 3, false, 2, sizeof(wire::Header) + 8 + 64);
  ASSERT_EQ(d.size(), 8u);
  for (size_t k = d.size(); k-- > 0;) {
    const auto r = rx_.OnData(d[k], 0);
    ASSERT_EQ(r.drop, DropReason::kNone);
    ASSERT_EQ(r.completed, k == 0);
  }
  EXPECT_EQ(rx_.complete_version(), 4u);
  EXPECT_TRUE(StagingEquals(next));
  EXPECT_EQ(rx_.changed().CountLines(), 8u);
}

TEST_F(ReplicaReceiverTest, BytesWrittenCountsTheLinesEachAcceptedFrameWroteUntilPublished) {
  const Bytes src = RandomContent(12);
  Establish(src, 3, 1);
  EXPECT_EQ(rx_.bytes_written(), 0u);
  // A delta of single lines and a run, in frames of a few lines each.
  const LineSet delta = Lines({0, 7, 100, 101, 102, 900});
  const Bytes next = Changed(src, delta, 13);
  const Frames d = MakeFrames(delta, next, 4, 3, false, 2, sizeof(wire::Header) + 8 + 2 * 64);
  ASSERT_GT(d.size(), 1u);
  ASSERT_EQ(rx_.OnData(d[0], 0).drop, DropReason::kNone);
  const size_t first = rx_.bytes_written();
  EXPECT_GT(first, 0u);
  EXPECT_EQ(rx_.OnData(d[0], 0).drop, DropReason::kDuplicate);
  EXPECT_EQ(rx_.bytes_written(), first) << "a duplicate wrote nothing";
  for (size_t i = 1; i < d.size(); ++i) ASSERT_EQ(rx_.OnData(d[i], 0).drop, DropReason::kNone);
  EXPECT_EQ(rx_.bytes_written(), 6 * kLineBytes);
  EXPECT_EQ(rx_.changed().CountLines(), 6u);
  EXPECT_TRUE(StagingEquals(next));
  rx_.Published();
  EXPECT_EQ(rx_.bytes_written(), 0u);
}

TEST_F(ReplicaReceiverTest, DuplicatesAreDroppedAndNotCountedTwice) {
  const Bytes src = RandomContent(3);
  const Frames frames = MakeFrames(All(), src, 1, 0, true, 5);
  ASSERT_GT(frames.size(), 3u);
  EXPECT_EQ(rx_.OnData(frames[0], 0).drop, DropReason::kNone);
  for (size_t k = 0; k < frames.size() + 2; ++k) {
    // As many duplicates as frames: counting them would complete the transfer.
    const auto r = rx_.OnData(frames[0], 0);
    ASSERT_EQ(r.drop, DropReason::kDuplicate);
    ASSERT_FALSE(r.completed);
  }
  EXPECT_TRUE(rx_.assembling());
  for (size_t i = 1; i < frames.size(); ++i) {
    const auto r = rx_.OnData(frames[i], 0);
    ASSERT_EQ(r.drop, DropReason::kNone);
    ASSERT_EQ(r.completed, i + 1 == frames.size());
  }
  EXPECT_TRUE(StagingEquals(src));
}

TEST_F(ReplicaReceiverTest, ADeltaWhoseBaseIsNewerThanTheCompleteVersionIsDroppedWithAnAck) {
  const Bytes v5 = RandomContent(4);
  // No base at all yet: a delta cannot apply.
  const Bytes other = Changed(v5, Lines({7}), 5);
  auto r = rx_.OnData(MakeFrames(Lines({7}), other, 6, 5, false, 1)[0], 0);
  EXPECT_EQ(r.drop, DropReason::kStaleVersion);
  EXPECT_TRUE(r.ack_now);
  EXPECT_FALSE(rx_.assembling());

  Establish(v5, 5, 2);
  const Bytes staged = staging_;
  r = rx_.OnData(MakeFrames(Lines({7}), other, 7, 6, false, 3)[0], 0);
  EXPECT_EQ(r.drop, DropReason::kStaleVersion);
  EXPECT_TRUE(r.ack_now);
  EXPECT_FALSE(r.completed);
  EXPECT_FALSE(rx_.assembling());
  EXPECT_EQ(staging_, staged);
  EXPECT_TRUE(rx_.changed().Empty());

  // Base 5 (= complete) and base 4 (older) both apply.
  r = rx_.OnData(MakeFrames(Lines({7}), other, 7, 5, false, 4)[0], 0);
  EXPECT_EQ(r.drop, DropReason::kNone);
  EXPECT_TRUE(r.completed);
  rx_.Published();
  const Bytes v8 = Changed(other, Lines({9}), 6);
  r = rx_.OnData(MakeFrames(Lines({7, 9}), v8, 8, 4, false, 5)[0], 0);
  EXPECT_EQ(r.drop, DropReason::kNone);
  EXPECT_TRUE(r.completed);
  EXPECT_TRUE(StagingEquals(v8));
}

TEST_F(ReplicaReceiverTest, AVersionNotNewerThanTheCompleteOneIsDroppedWithAnAck) {
  const Bytes v5 = RandomContent(5);
  Establish(v5, 5, 1);
  const Bytes staged = staging_;
  const Bytes junk = RandomContent(99);
  for (const auto& frames : {MakeFrames(All(), junk, 5, 0, true, 2),        // same version, full
                             MakeFrames(Lines({3}), junk, 5, 4, false, 3),  // same version, delta
                             MakeFrames(All(), junk, 4, 0, true, 4),        // older, full
                             MakeFrames(Lines({3}), junk, 4, 2, false, 5)}) {
    const auto r = rx_.OnData(frames[0], 0);
    EXPECT_EQ(r.drop, DropReason::kStaleVersion);
    EXPECT_TRUE(r.ack_now);
    EXPECT_FALSE(r.completed);
  }
  EXPECT_EQ(staging_, staged);
  EXPECT_FALSE(rx_.assembling());
  EXPECT_EQ(rx_.complete_version(), 5u);
}

TEST_F(ReplicaReceiverTest, ANewerTransferAbandonsAnIncompleteOlderOneAndCompletesExactly) {
  const Bytes v1 = RandomContent(6);
  Establish(v1, 1, 1);
  // 1 -> 2 changes lines 10..29 and 700; 2 -> 3 changes 40 and 700 again.
  LineSet d12(kArea);
  d12.AddLines(10, 20);
  d12.AddLines(700, 1);
  const Bytes v2 = Changed(v1, d12, 7);
  const LineSet d23 = Lines({40, 700});
  const Bytes v3 = Changed(v2, d23, 8);

  const Frames a = MakeFrames(d12, v2, 2, 1, false, 10);  // 1 -> 2
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(rx_.OnData(a[0], 0).drop, DropReason::kNone);
  EXPECT_EQ(rx_.OnData(a[2], 0).drop, DropReason::kNone);  // lines 26..29 and 700 of v2
  EXPECT_EQ(rx_.assembling_version(), 2u);
  EXPECT_EQ(Missing(rx_), (Ranges{{1, 1}}));

  LineSet d13 = d12;  // what changed since 1, as the sender's resend carries it
  d13.Merge(d23);
  const Frames b = MakeFrames(d13, v3, 3, 1, false, 11);  // 1 -> 3
  ASSERT_EQ(b.size(), 3u);
  auto r = rx_.OnData(b[1], 0);
  EXPECT_EQ(r.drop, DropReason::kNone);
  EXPECT_EQ(rx_.assembling_version(), 3u);
  EXPECT_EQ(rx_.assembling_transfer(), 11u);
  EXPECT_EQ(Missing(rx_), (Ranges{{0, 1}, {2, 1}}));
  // The rest of the abandoned transfer no longer applies.
  r = rx_.OnData(a[1], 0);
  EXPECT_EQ(r.drop, DropReason::kStaleVersion);
  EXPECT_EQ(rx_.assembling_version(), 3u);
  EXPECT_EQ(rx_.OnData(b[0], 0).drop, DropReason::kNone);
  r = rx_.OnData(b[2], 0);
  EXPECT_EQ(r.drop, DropReason::kNone);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(rx_.complete_version(), 3u);
  EXPECT_TRUE(StagingEquals(v3));
}

TEST_F(ReplicaReceiverTest, ANewTransferOfTheSameVersionRestartsTheAssembly) {
  const Bytes v1 = RandomContent(7);
  Establish(v1, 1, 1);
  LineSet d(kArea);
  d.AddLines(0, 24);
  const Bytes v2 = Changed(v1, d, 9);
  const Frames a = MakeFrames(d, v2, 2, 1, false, 20);
  const Frames b = MakeFrames(d, v2, 2, 1, false, 21);  // resent with a new id
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(rx_.OnData(a[0], 0).drop, DropReason::kNone);
  EXPECT_EQ(rx_.OnData(a[1], 0).drop, DropReason::kNone);
  EXPECT_EQ(rx_.OnData(b[2], 0).drop, DropReason::kNone);
  EXPECT_EQ(rx_.assembling_transfer(), 21u);
  EXPECT_EQ(Missing(rx_), (Ranges{{0, 2}}));
  EXPECT_FALSE(rx_.OnData(b[0], 0).completed);
  EXPECT_TRUE(rx_.OnData(b[1], 0).completed);
  EXPECT_TRUE(StagingEquals(v2));
}

TEST_F(ReplicaReceiverTest, AnOlderTransferAfterANewerOneIsRefused) {
  const Bytes v1 = RandomContent(8);
  Establish(v1, 1, 1);
  const LineSet d12 = Lines({5, 6});
  const Bytes v2 = Changed(v1, d12, 10);
  LineSet d13 = Lines({5, 6, 300});
  const Bytes v3 = Changed(v2, Lines({300}), 11);
  const Frames newer = MakeFrames(d13, v3, 3, 1, false, 31, sizeof(wire::Header) + 8 + 64);
  const Frames older = MakeFrames(d12, v2, 2, 1, false, 30, sizeof(wire::Header) + 8 + 64);
  ASSERT_EQ(newer.size(), 3u);
  EXPECT_EQ(rx_.OnData(newer[0], 0).drop, DropReason::kNone);
  const Bytes staged = staging_;
  for (size_t i = 0; i < older.size(); ++i) {
    const auto r = rx_.OnData(older[i], 0);
    EXPECT_EQ(r.drop, DropReason::kStaleVersion);
    EXPECT_FALSE(r.completed);
  }
  EXPECT_EQ(staging_, staged);
  EXPECT_EQ(rx_.assembling_version(), 3u);
  EXPECT_EQ(rx_.assembling_transfer(), 31u);
  EXPECT_EQ(rx_.OnData(newer[1], 0).drop, DropReason::kNone);
  EXPECT_TRUE(rx_.OnData(newer[2], 0).completed);
  EXPECT_TRUE(StagingEquals(v3));
  rx_.Published();
  // And once 3 is complete, 2 is older than what we have.
  const auto r = rx_.OnData(older[0], 0);
  EXPECT_EQ(r.drop, DropReason::kStaleVersion);
  EXPECT_TRUE(r.ack_now);
}

TEST_F(ReplicaReceiverTest, RunsOutsideTheAreaAreRefusedBeforeAnythingElse) {
  // Frames of a larger area: lines 1001 (just past the end) and 998..1002 (straddling it).
  const size_t big = 1100 * kLineBytes;
  Bytes content(big, 0x5a);
  LineSet past(big);
  past.AddLines(1001, 1);
  LineSet straddle(big);
  straddle.AddLines(998, 5);
  LineSet last(big);
  last.AddLines(1000, 1);  // the partial last line: inside

  Bytes v = RandomContent(9);
  Establish(v, 5, 1);
  const Bytes staged = staging_;
  rx_.set_version_limit(10);
  // Not yet published, stale, beyond the limit, no base: out of range wins.
  ApplyAll(MakeFrames(Lines({1}), v, 6, 5, false, 2));
  ASSERT_TRUE(rx_.publish_pending());
  for (uint64_t version : {uint64_t{3}, uint64_t{5}, uint64_t{7}, uint64_t{50}}) {
    for (const LineSet* lines : {&past, &straddle}) {
      const Frames f = MakeFrames(*lines, content, version, 99, false, 3, 1472);
      ASSERT_EQ(f.size(), 1u);
      const auto r = rx_.OnData(f[0], 0);
      EXPECT_EQ(r.drop, DropReason::kOutOfRange) << "version " << version;
      EXPECT_FALSE(r.ack_now);
      EXPECT_FALSE(r.completed);
    }
  }
  rx_.Published();
  EXPECT_EQ(staging_, staged);
  const Frames in = MakeFrames(last, content, 7, 6, false, 4, 1472);
  EXPECT_EQ(rx_.OnData(in[0], 0).drop, DropReason::kNone);
  EXPECT_EQ(rx_.complete_version(), 7u);
}

TEST_F(ReplicaReceiverTest, VersionsAboveTheLimitAreRefused) {
  rx_.set_version_limit(10);
  const Bytes src = RandomContent(10);
  const Frames f11 = MakeFrames(All(), src, 11, 0, true, 1);
  auto r = rx_.OnData(f11[0], 0);
  EXPECT_EQ(r.drop, DropReason::kStaleVersion);
  EXPECT_FALSE(r.ack_now);
  EXPECT_FALSE(rx_.assembling());
  ApplyAll(MakeFrames(All(), src, 10, 0, true, 2));
  EXPECT_EQ(rx_.complete_version(), 10u);
  EXPECT_TRUE(StagingEquals(src));
}

TEST_F(ReplicaReceiverTest, APendingPublishHoldsNewFramesBack) {
  const Bytes v1 = RandomContent(11);
  ApplyAll(MakeFrames(All(), v1, 1, 0, true, 1));
  ASSERT_TRUE(rx_.publish_pending());
  const Bytes v2 = Changed(v1, Lines({8}), 12);
  const Frames d = MakeFrames(Lines({8}), v2, 2, 1, false, 2);
  for (int i = 0; i < 3; ++i) {
    const auto r = rx_.OnData(d[0], 0);
    EXPECT_EQ(r.drop, DropReason::kBusy);
    EXPECT_FALSE(r.completed);
  }
  EXPECT_TRUE(StagingEquals(v1)) << "staging must not change before the local publish";
  EXPECT_EQ(rx_.changed().CountLines(), kLines);
  rx_.Published();
  EXPECT_FALSE(rx_.publish_pending());
  EXPECT_TRUE(rx_.changed().Empty());
  const auto r = rx_.OnData(d[0], 0);
  EXPECT_EQ(r.drop, DropReason::kNone);
  EXPECT_TRUE(r.completed);
  EXPECT_TRUE(StagingEquals(v2));
  EXPECT_EQ(rx_.changed().CountLines(), 1u);
  EXPECT_TRUE(rx_.changed().Test(8));
}

TEST_F(ReplicaReceiverTest, TheTargetMovesOnlyBetweenVersions) {
  const Bytes v1 = RandomContent(21);
  Establish(v1, 1, 1);
  Bytes other(kRounded, 0x55);
  ASSERT_TRUE(rx_.SetTarget(other.data()));  // between versions
  EXPECT_EQ(rx_.target(), other.data());
  const Bytes v2 = Changed(v1, Lines({3, 300}), 22);
  const Frames d = MakeFrames(Lines({3, 300}), v2, 2, 1, false, 2, sizeof(wire::Header) +
                                                                  sizeof(wire::Run) + kLineBytes);
  ASSERT_EQ(d.size(), 2u);
  ASSERT_EQ(rx_.OnData(d[0], 0).drop, DropReason::kNone);
  // A line is staged in `other`: moving now would split the version.
  EXPECT_FALSE(rx_.SetTarget(staging_.data()));
  EXPECT_EQ(rx_.target(), other.data());
  ASSERT_TRUE(rx_.OnData(d[1], 0).completed);
  for (size_t line : {size_t{3}, size_t{300}}) {
    EXPECT_EQ(std::memcmp(other.data() + line * kLineBytes, v2.data() + line * kLineBytes, kLineBytes), 0)
        << "line " << line;
  }
  EXPECT_TRUE(StagingEquals(v1)) << "the old target must not be written after the move";
  rx_.Published();
  EXPECT_TRUE(rx_.SetTarget(staging_.data()));
}

TEST_F(ReplicaReceiverTest, ForwardCopiesGetEveryAcceptedLineUntilTheTargetMoves) {
  const Bytes v1 = RandomContent(23);
  Establish(v1, 1, 1);
  Bytes forward(kRounded, 0x77);
  ASSERT_TRUE(rx_.SetForward(forward.data()));
  EXPECT_EQ(rx_.forward(), forward.data());
  const Bytes v2 = Changed(v1, Lines({3, 300}), 24);
  const Frames d = MakeFrames(Lines({3, 300}), v2, 2, 1, false, 2,
                              sizeof(wire::Header) + sizeof(wire::Run) + kLineBytes);
  ASSERT_EQ(d.size(), 2u);
  ASSERT_EQ(rx_.OnData(d[0], 0).drop, DropReason::kNone);
  EXPECT_FALSE(rx_.SetForward(nullptr)) << "a line is already forwarded: the version would split";
  EXPECT_EQ(rx_.OnData(d[0], 0).drop, DropReason::kDuplicate);
  ASSERT_TRUE(rx_.OnData(d[1], 0).completed);
  Bytes expected(kRounded, 0x77);
  for (size_t line : {size_t{3}, size_t{300}}) {
    std::memcpy(expected.data() + line * kLineBytes, v2.data() + line * kLineBytes, kLineBytes);
  }
  EXPECT_EQ(forward, expected) << "the version's lines, and nothing else";
  rx_.Published();
  ASSERT_TRUE(rx_.SetTarget(staging_.data()));
  EXPECT_EQ(rx_.forward(), nullptr) << "a new target ends the forward copies";
}

TEST_F(ReplicaReceiverTest, MissingRangesReportsTheExactGaps) {
  EXPECT_TRUE(Missing(rx_).empty());
  const Bytes src = RandomContent(12);
  const Frames frames = MakeFrames(All(), src, 0, 0, true, 9);  // version 0
  ASSERT_EQ(frames.size(), 126u);
  for (size_t seq : {0, 3, 4, 8, 62, 65, 124}) {
    ASSERT_EQ(rx_.OnData(frames[seq], 0).drop, DropReason::kNone);
  }
  EXPECT_TRUE(rx_.assembling()) << "a version-0 transfer is assembled too";
  EXPECT_EQ(rx_.assembling_version(), 0u);
  EXPECT_EQ(rx_.assembling_transfer(), 9u);
  const Ranges all{{1, 2}, {5, 3}, {9, 53}, {63, 2}, {66, 58}, {125, 1}};
  EXPECT_EQ(Missing(rx_), all);
  EXPECT_EQ(Missing(rx_, 2), (Ranges{{1, 2}, {5, 3}}));
  EXPECT_EQ(Missing(rx_, 0), Ranges{});
  // Fill all but the frames that straddle the 64-bit words of the bitmap.
  for (size_t seq = 0; seq < frames.size(); ++seq) {
    if (seq == 63 || seq == 64 || seq == 125) continue;
    rx_.OnData(frames[seq], 0);
  }
  EXPECT_EQ(Missing(rx_), (Ranges{{63, 2}, {125, 1}}));
  rx_.OnData(frames[63], 0);
  rx_.OnData(frames[125], 0);
  EXPECT_EQ(Missing(rx_), (Ranges{{64, 1}}));
  EXPECT_TRUE(rx_.OnData(frames[64], 0).completed);
  EXPECT_TRUE(Missing(rx_).empty());
  EXPECT_EQ(rx_.complete_version(), 0u);
  EXPECT_TRUE(rx_.has_base());
  EXPECT_TRUE(StagingEquals(src));
}

TEST_F(ReplicaReceiverTest, ManyGapsAreCappedAtMax) {
  const Bytes src = RandomContent(13);
  const Frames frames = MakeFrames(All(), src, 1, 0, true, 1);
  for (size_t seq = 0; seq < frames.size(); seq += 2) rx_.OnData(frames[seq], 0);
  const Ranges gaps = Missing(rx_, wire::kMaxMissingRanges);
  ASSERT_EQ(gaps.size(), 63u);  // odd seqs 1..125
  for (size_t i = 0; i < gaps.size(); ++i) EXPECT_EQ(gaps[i], std::make_pair(uint32_t(2 * i + 1), 1u));
  EXPECT_EQ(Missing(rx_, 10).size(), 10u);
}

TEST_F(ReplicaReceiverTest, AFrameCountThatChangesWithinATransferIsABadLayout) {
  const Bytes src = RandomContent(14);
  const Frames a = MakeFrames(All(), src, 1, 0, true, 1);
  const Frames b = MakeFrames(All(), src, 1, 0, true, 1, 1472);  // same id, other framing
  EXPECT_EQ(rx_.OnData(a[0], 0).drop, DropReason::kNone);
  EXPECT_EQ(rx_.OnData(b[1], 0).drop, DropReason::kBadLayout);
  EXPECT_EQ(Missing(rx_).size(), 1u);
}

}  // namespace
}  // namespace dsm
