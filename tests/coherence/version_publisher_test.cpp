#include "coherence/version_publisher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "libdsm/contract/region_limits.h"

namespace dsm {
namespace {

using Runs = std::vector<std::pair<size_t, size_t>>;

Runs CollectRuns(const LineSet& set) {
  Runs runs;
  set.ForEachRun([&](size_t first, size_t count) { runs.emplace_back(first, count); });
  return runs;
}

Runs ModelRuns(const std::vector<bool>& model) {
  Runs runs;
  for (size_t i = 0; i < model.size();) {
    size_t j = i;
    while (j < model.size() && model[j]) ++j;
    if (j > i) runs.emplace_back(i, j - i);
    i = j + 1;
  }
  return runs;
}

// Publish reads and writes whole lines: buffers are rounded up to them (the
// library's are rounded up to pages).
size_t RoundUpToLines(size_t bytes) { return (bytes + kLineBytes - 1) / kLineBytes * kLineBytes; }

// --- PackLatest / UnpackLatest ----------------------------------------------------

static_assert(UnpackLatest(PackLatest(7, 3)).version == 7);
static_assert(UnpackLatest(PackLatest(7, 3)).buffer == 3);

TEST(LatestWordTest, RoundTripsVersionAndBuffer) {
  const uint64_t versions[] = {0, 1, 2, 255, 256, 123456789, (uint64_t{1} << 56) - 1};
  for (uint64_t v : versions) {
    for (uint32_t b : {0u, 1u, 2u, 3u, 255u}) {
      const LatestVersion latest = UnpackLatest(PackLatest(v, b));
      EXPECT_EQ(latest.version, v);
      EXPECT_EQ(latest.buffer, b);
    }
  }
}

TEST(LatestWordTest, BufferIndexNeverSpillsIntoTheVersion) {
  const LatestVersion latest = UnpackLatest(PackLatest(5, 0x1ff));
  EXPECT_EQ(latest.version, 5u);
  EXPECT_EQ(latest.buffer, 0xffu);
}

TEST(LatestWordTest, WordsOrderByVersionWhateverTheBuffer) {
  // Readers compare words to tell which version is newer.
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{1000}}) {
    EXPECT_LT(PackLatest(v, 255), PackLatest(v + 1, 0));
  }
}

// --- PickTargetBuffer -------------------------------------------------------------

TEST(PickTargetBufferTest, PrefersTheBufferAfterLatest) {
  for (uint32_t n = 2; n <= kMaxReaderBuffers; ++n) {
    for (uint32_t latest = 0; latest < n; ++latest) {
      EXPECT_EQ(PickTargetBuffer(n, latest, 0), static_cast<int>((latest + 1) % n))
          << n << " buffers, latest " << latest;
    }
  }
}

TEST(PickTargetBufferTest, SkipsPinnedBuffersInRoundRobinOrder) {
  EXPECT_EQ(PickTargetBuffer(4, 1, 1u << 2), 3);
  EXPECT_EQ(PickTargetBuffer(4, 1, (1u << 2) | (1u << 3)), 0);
  EXPECT_EQ(PickTargetBuffer(4, 3, 1u << 0), 1);  // wraps past the end
  EXPECT_EQ(PickTargetBuffer(3, 2, 1u << 0), 1);
}

TEST(PickTargetBufferTest, NeverReturnsLatestEvenWhenUnpinned) {
  // Buffer 0 is the only unpinned one, and it is the latest.
  EXPECT_EQ(PickTargetBuffer(3, 0, 0b110), -1);
  EXPECT_EQ(PickTargetBuffer(2, 1, 0b01), -1);
}

TEST(PickTargetBufferTest, APinOnLatestDoesNotBlockTheSpares) {
  EXPECT_EQ(PickTargetBuffer(2, 0, 0b01), 1);
  EXPECT_EQ(PickTargetBuffer(4, 2, 0b0100), 3);
}

TEST(PickTargetBufferTest, ReturnsMinusOneWhenEverySpareIsPinned) {
  for (uint32_t n = 2; n <= kMaxReaderBuffers; ++n) {
    const uint32_t all = (1u << n) - 1;
    for (uint32_t latest = 0; latest < n; ++latest) {
      EXPECT_EQ(PickTargetBuffer(n, latest, all & ~(1u << latest)), -1);
      EXPECT_EQ(PickTargetBuffer(n, latest, all), -1);
    }
  }
  EXPECT_EQ(PickTargetBuffer(1, 0, 0), -1);  // one buffer has no spare at all
}

TEST(PickTargetBufferTest, EveryMaskAgreesWithTheDefinition) {
  for (uint32_t n = 1; n <= kMaxReaderBuffers; ++n) {
    for (uint32_t latest = 0; latest < n; ++latest) {
      for (uint32_t mask = 0; mask < (1u << n); ++mask) {
        // Bits of buffers that do not exist must not matter.
        for (uint32_t junk : {0u, 0xfffffff0u & ~((1u << n) - 1)}) {
          int expected = -1;
          for (uint32_t step = 1; step < n && expected < 0; ++step) {
            const uint32_t b = (latest + step) % n;
            if (!(mask & (1u << b))) expected = static_cast<int>(b);
          }
          const int got = PickTargetBuffer(n, latest, mask | junk);
          EXPECT_EQ(got, expected) << n << " buffers, latest " << latest << ", mask " << mask;
          if (got >= 0) {
            EXPECT_NE(static_cast<uint32_t>(got), latest);
            EXPECT_EQ(mask & (1u << got), 0u);
          }
        }
      }
    }
  }
}

constexpr size_t kCanaryBytes = 2 * kLineBytes;
constexpr uint8_t kCanary = 0xa5;

// --- VersionPublisher: fixed scenarios ----------------------------------------------

TEST(VersionPublisherTest, ReportsItsShape) {
  VersionPublisher pub(1000, 3);
  EXPECT_EQ(pub.area_bytes(), 1000u);
  EXPECT_EQ(pub.buffer_count(), 3u);
  for (uint32_t b = 0; b < 3; ++b) {
    EXPECT_EQ(pub.pending(b).lines(), 16u);
    EXPECT_TRUE(pub.pending(b).Empty());
  }
}

TEST(VersionPublisherTest, PublishCopiesDirtyLinesAndMovesThemToTheOtherBuffers) {
  const size_t area = 4096;
  std::vector<uint8_t> writer(area, 0x11);
  std::vector<uint8_t> buf1(area, 0x00);  // differs everywhere, so stray copies show
  VersionPublisher pub(area, 2);
  ChangeLog dirty(area);
  std::fill_n(writer.begin() + 3 * kLineBytes, kLineBytes, 0x22);
  dirty.MarkLines(3, 1);

  EXPECT_EQ(pub.Publish(dirty, 1, writer.data(), buf1.data()), kLineBytes);
  EXPECT_TRUE(dirty.Empty());
  for (size_t i = 0; i < area; ++i) {
    ASSERT_EQ(buf1[i], (i / kLineBytes == 3) ? 0x22 : 0x00) << i;
  }
  EXPECT_TRUE(pub.pending(1).Empty());
  EXPECT_EQ(CollectRuns(pub.pending(0)), (Runs{{3, 1}}));
}

TEST(VersionPublisherTest, BufferThatMissedVersionsCatchesUpInOneCopy) {
  const size_t area = 3 * 4096 + 100;
  std::vector<uint8_t> writer(RoundUpToLines(area), 0);
  std::vector<std::vector<uint8_t>> buffers(3, writer);
  VersionPublisher pub(area, 3);
  ChangeLog dirty(area);
  auto write_line = [&](size_t line, uint8_t value) {
    std::fill_n(writer.begin() + line * kLineBytes, kLineBytes, value);
    dirty.MarkLines(line, 1);
  };

  write_line(1, 1);  // v1 -> buffer 1
  ASSERT_EQ(pub.Publish(dirty, 1, writer.data(), buffers[1].data()), kLineBytes);
  write_line(70, 2);  // v2 -> buffer 2, which also missed v1
  ASSERT_EQ(pub.Publish(dirty, 2, writer.data(), buffers[2].data()), 2 * kLineBytes);
  write_line(1, 3);    // v3 -> buffer 0, which missed v1 and v2
  write_line(193, 4);  // the partial last line, copied whole
  EXPECT_EQ(pub.Publish(dirty, 0, writer.data(), buffers[0].data()), 3 * kLineBytes);
  EXPECT_EQ(buffers[0], writer);
  EXPECT_TRUE(pub.pending(0).Empty());
  EXPECT_EQ(CollectRuns(pub.pending(1)), (Runs{{1, 1}, {70, 1}, {193, 1}}));
  EXPECT_EQ(CollectRuns(pub.pending(2)), (Runs{{1, 1}, {193, 1}}));
}

// A replica's three reader buffers as dsmd fills them: frames write a
// version's lines straight into the buffer that will hold it.
struct InPlaceReplica {
  static constexpr size_t kArea = 2 * 4096;
  std::vector<std::vector<uint8_t>> buffers{3, std::vector<uint8_t>(kArea, 0)};
  VersionPublisher pub{kArea, 3};
  LineSet written{kArea};
  void Write(uint32_t buffer, size_t line, uint8_t value) {
    std::fill_n(buffers[buffer].begin() + line * kLineBytes, kLineBytes, value);
    written.AddLines(line, 1);
  }
  // Publishes what was written into `target` as the next version after the
  // one in `latest`; returns the bytes the publish copied.
  size_t Publish(uint32_t target, uint32_t latest) {
    const size_t copied = pub.PublishInPlace(written, target, buffers[latest].data(), buffers[target].data());
    written.Clear();
    return copied;
  }
};

TEST(VersionPublisherTest, InPlaceCatchesUpFromTheLatestBufferAndLeavesWrittenLinesAlone) {
  // Only what the target missed besides the version's own lines comes from the latest.
  InPlaceReplica r;
  r.Write(1, 5, 1);  // v1: lines 5 and 64 into buffer 1
  r.Write(1, 64, 1);
  ASSERT_EQ(r.Publish(1, 0), 0u);
  r.Write(2, 5, 2);  // v2: line 5 again, into buffer 2, which missed line 64 of v1
  EXPECT_EQ(r.Publish(2, 1), kLineBytes);
  const auto& b2 = r.buffers[2];
  EXPECT_EQ(b2[5 * kLineBytes], 2) << "a written line was overwritten by the older version";
  EXPECT_EQ(b2[64 * kLineBytes], 1) << "a missed line was not caught up";
  EXPECT_EQ(std::count(b2.begin(), b2.end(), 0), static_cast<long>(InPlaceReplica::kArea - 2 * kLineBytes));
  EXPECT_TRUE(r.pub.pending(2).Empty());
  EXPECT_EQ(CollectRuns(r.pub.pending(0)), (Runs{{5, 1}, {64, 1}}));
  EXPECT_EQ(CollectRuns(r.pub.pending(1)), (Runs{{5, 1}}));
}

TEST(VersionPublisherTest, VersionsWrittenInPlaceLeaveTheSparesLackingTheWholeArea) {
  // dsmd with no reader on its host writes each staged version into the
  // latest buffer; once a reader attached, the next version goes to a spare,
  // which then copies the whole area from the latest buffer, nothing less.
  constexpr size_t kArea = 3 * kLinesPerPage * kLineBytes;
  VersionPublisher pub(kArea, 2);
  std::vector<std::vector<uint8_t>> buffers(2, std::vector<uint8_t>(kArea, 0));
  std::vector<uint8_t> writer(kArea, 0);
  auto stage = [&](std::vector<LineRun> runs, uint8_t value, std::vector<uint8_t>* bytes) {
    bytes->clear();
    for (const LineRun& r : runs) {
      for (uint32_t l = r.first_line; l < r.first_line + r.line_count; ++l) {
        std::memset(writer.data() + size_t{l} * kLineBytes, value, kLineBytes);
        bytes->insert(bytes->end(), writer.begin() + static_cast<long>(l * kLineBytes),
                      writer.begin() + static_cast<long>((l + 1) * kLineBytes));
      }
    }
    return runs;
  };
  std::vector<uint8_t> bytes;
  auto runs = stage({{3, 2}, {70, 1}}, 1, &bytes);
  EXPECT_EQ(pub.PublishRunsInPlace(runs, bytes.data(), 0, buffers[0].data()), 3 * kLineBytes);
  runs = stage({{4, 1}, {150, 3}}, 2, &bytes);
  EXPECT_EQ(pub.PublishRunsInPlace(runs, bytes.data(), 0, buffers[0].data()), 4 * kLineBytes);
  EXPECT_EQ(buffers[0], writer);
  EXPECT_TRUE(pub.pending(0).Empty());
  EXPECT_EQ(pub.pending(1).CountLines(), kArea / kLineBytes) << "the spare must lack everything";

  // A reader maps buffer 0; the next version goes to buffer 1.
  runs = stage({{100, 1}}, 3, &bytes);
  const size_t copied =
      pub.PublishRuns(runs, bytes.data(), 1, buffers[0].data(), buffers[1].data());
  EXPECT_EQ(copied, kArea) << "its own line, and every other line from the latest buffer";
  EXPECT_EQ(buffers[1], writer);
  EXPECT_TRUE(pub.pending(1).Empty());
  EXPECT_EQ(CollectRuns(pub.pending(0)), (Runs{{100, 1}}));
}

TEST(VersionPublisherTest, CatchUpAheadOfAVersionLeavesNothingForItsPublish) {
  // dsmd brings the next target up to date while it waits for the next
  // version; the version's lines then land on top, and its publish copies none.
  InPlaceReplica r;
  r.Write(1, 5, 1);  // v1 into buffer 1: lines 5 and 64
  r.Write(1, 64, 1);
  ASSERT_EQ(r.Publish(1, 0), 0u);
  EXPECT_EQ(r.pub.CatchUp(2, r.buffers[1].data(), r.buffers[2].data()), 2 * kLineBytes);
  EXPECT_EQ(r.buffers[2], r.buffers[1]);
  EXPECT_TRUE(r.pub.pending(2).Empty());
  r.Write(2, 64, 2);  // v2: line 64 again
  EXPECT_EQ(r.Publish(2, 1), 0u);
  EXPECT_EQ(r.buffers[2][5 * kLineBytes], 1);
  EXPECT_EQ(r.buffers[2][64 * kLineBytes], 2) << "the caught-up line hid the new version's";
  EXPECT_EQ(CollectRuns(r.pub.pending(0)), (Runs{{5, 1}, {64, 1}}));
  EXPECT_EQ(CollectRuns(r.pub.pending(1)), (Runs{{64, 1}}));
}

TEST(VersionPublisherTest, CopyLackingThenRecordPublishedIsPublishInPlaceInTwoHalves) {
  // dsmd makes a replica's version visible between the halves: the target
  // is complete after the first, the other buffers learn what they lack in
  // the second, and the two together leave what PublishInPlace leaves.
  InPlaceReplica whole, halves;
  for (InPlaceReplica* r : {&whole, &halves}) {
    r->Write(1, 5, 1);  // v1 into buffer 1: lines 5 and 64
    r->Write(1, 64, 1);
    ASSERT_EQ(r->Publish(1, 0), 0u);
    r->Write(2, 5, 2);  // v2 into buffer 2: line 5 again, line 100
    r->Write(2, 100, 2);
  }
  EXPECT_EQ(whole.Publish(2, 1), kLineBytes);
  EXPECT_EQ(
      halves.pub.CopyLacking(halves.written, 2, halves.buffers[1].data(), halves.buffers[2].data()),
      kLineBytes);
  EXPECT_EQ(halves.buffers[2], whole.buffers[2]) << "the target is not complete after the copy";
  EXPECT_TRUE(halves.pub.pending(2).Empty());
  EXPECT_EQ(CollectRuns(halves.pub.pending(1)), Runs{}) << "bookkeeping came before its half";
  halves.pub.RecordPublished(halves.written, 2);
  for (uint32_t b = 0; b < 3; ++b) {
    EXPECT_EQ(CollectRuns(halves.pub.pending(b)), CollectRuns(whole.pub.pending(b)))
        << "buffer " << b;
  }
  EXPECT_EQ(CollectRuns(halves.pub.pending(1)), (Runs{{5, 1}, {100, 1}}));
  EXPECT_EQ(halves.pub.last_version_lines(), 2u);
}

TEST(VersionPublisherTest, CatchingUpAheadIsWorthwhileUnlessBothMissedAndLastVersionAreLarge) {
  // 256 lines. A version rewriting most of the area would overwrite most of
  // an early catch-up: that copy is left to the publish. After a sparse
  // version, the next one likely leaves most of it in place.
  const size_t area = 256 * kLineBytes;
  std::vector<uint8_t> writer(area, 0), buffer(area, 0);
  VersionPublisher pub(area, 2);
  ChangeLog dirty(area);
  EXPECT_TRUE(pub.CatchUpWorthwhile(1)) << "nothing missed: trivially cheap";
  dirty.MarkBytes(0, 64 * kLineBytes);  // a quarter of the lines, into buffer 0
  pub.Publish(dirty, 0, writer.data(), buffer.data());
  EXPECT_EQ(pub.last_version_lines(), 64u);
  EXPECT_TRUE(pub.CatchUpWorthwhile(1));
  EXPECT_TRUE(pub.CatchUpWorthwhile(0)) << "the target itself missed nothing";
  dirty.MarkBytes(0, 65 * kLineBytes);  // one line more than a quarter
  pub.Publish(dirty, 0, writer.data(), buffer.data());
  EXPECT_FALSE(pub.CatchUpWorthwhile(1)) << "65 lines missed, and the versions are dense";
  dirty.MarkBytes(200 * kLineBytes, kLineBytes);  // a sparse version
  pub.Publish(dirty, 0, writer.data(), buffer.data());
  EXPECT_EQ(pub.last_version_lines(), 1u);
  EXPECT_TRUE(pub.CatchUpWorthwhile(1)) << "66 lines missed, but the last version wrote one";
  LineSet in_place(area);
  in_place.AddLines(0, 100);  // a dense version received in place
  pub.PublishInPlace(in_place, 1, buffer.data(), buffer.data());
  EXPECT_EQ(pub.last_version_lines(), 100u);
  EXPECT_FALSE(pub.CatchUpWorthwhile(0)) << "100 lines missed after a dense version";
}

TEST(VersionPublisherTest, EmptyPublishStillCatchesTheTargetUp) {
  const size_t area = 4096;
  std::vector<uint8_t> writer(area, 0);
  std::vector<std::vector<uint8_t>> buffers(3, writer);
  VersionPublisher pub(area, 3);
  ChangeLog dirty(area);
  writer[5] = 9;
  dirty.MarkBytes(5, 1);
  ASSERT_EQ(pub.Publish(dirty, 1, writer.data(), buffers[1].data()), kLineBytes);
  EXPECT_EQ(pub.Publish(dirty, 2, writer.data(), buffers[2].data()), kLineBytes);
  EXPECT_EQ(buffers[2], writer);
  EXPECT_EQ(pub.Publish(dirty, 1, writer.data(), buffers[1].data()), 0u);
}

TEST(VersionPublisherTest, BufferHeldForeverIsNeverWrittenAndCatchesUpWhenFreed) {
  // A reader that stops checking in keeps buffer 2 pinned: it must stay byte for
  // byte as it was while the others keep taking versions.
  const size_t area = 5 * 4096 + 7;
  constexpr uint32_t kBuffers = 4, kHeld = 2;
  std::mt19937_64 rng(0x5eed0003);
  std::vector<uint8_t> writer(RoundUpToLines(area));
  for (uint8_t& b : writer) b = static_cast<uint8_t>(rng());
  std::vector<std::vector<uint8_t>> buffers(kBuffers, writer);
  const std::vector<uint8_t> held_before = buffers[kHeld];
  VersionPublisher pub(area, kBuffers);
  ChangeLog dirty(area);
  std::vector<bool> ever_dirty(dirty.lines());
  uint32_t latest = 0;
  for (int v = 0; v < 200; ++v) {
    const size_t offset = rng() % area;
    writer[offset] = static_cast<uint8_t>(writer[offset] + 1);
    dirty.MarkBytes(offset, 1);
    ever_dirty[offset / kLineBytes] = true;
    const int target = PickTargetBuffer(kBuffers, latest, 1u << kHeld);
    ASSERT_GE(target, 0);
    ASSERT_NE(static_cast<uint32_t>(target), kHeld);
    pub.Publish(dirty, target, writer.data(), buffers[target].data());
    ASSERT_EQ(buffers[target], writer);
    latest = target;
  }
  EXPECT_EQ(buffers[kHeld], held_before);
  EXPECT_EQ(CollectRuns(pub.pending(kHeld)), ModelRuns(ever_dirty));

  const int target = PickTargetBuffer(kBuffers, latest, 0b1011 & ~(1u << latest));
  ASSERT_EQ(target, static_cast<int>(kHeld));
  pub.Publish(dirty, kHeld, writer.data(), buffers[kHeld].data());
  EXPECT_EQ(buffers[kHeld], writer);
}

TEST(VersionPublisherTest, PartialLastLineIsCopiedWholeAndNothingPastIt) {
  const size_t area = 2 * 4096 + 1000;  // the last line holds 40 bytes of the area
  const size_t rounded = RoundUpToLines(area);
  std::vector<uint8_t> writer(rounded + kCanaryBytes, 0x33);  // bytes past `rounded` must not move
  std::vector<uint8_t> buf(rounded + kCanaryBytes, kCanary);
  VersionPublisher pub(area, 2);
  ChangeLog dirty(area);
  dirty.MarkBytes(0, area);
  EXPECT_EQ(pub.Publish(dirty, 1, writer.data(), buf.data()), rounded);
  EXPECT_EQ(std::memcmp(buf.data(), writer.data(), rounded), 0);
  EXPECT_TRUE(
      std::all_of(buf.begin() + rounded, buf.end(), [](uint8_t b) { return b == kCanary; }));
}

TEST(VersionPublisherTest, ChangedReceivesTheDirtyLinesOnly) {
  const size_t area = 8 * 4096;
  std::vector<uint8_t> writer(area, 1);
  std::vector<std::vector<uint8_t>> buffers(3, std::vector<uint8_t>(area, 0));
  VersionPublisher pub(area, 3);
  ChangeLog dirty(area);
  dirty.MarkLines(10, 3);
  pub.Publish(dirty, 1, writer.data(), buffers[1].data());  // buffer 2 now misses 10..12

  LineSet changed(area);
  changed.AddLines(500, 1);  // what the caller had already: kept
  dirty.MarkLines(63, 2);
  dirty.MarkLines(7 * 64 + 63, 1);
  EXPECT_EQ(pub.Publish(dirty, 2, writer.data(), buffers[2].data(), &changed), 6 * kLineBytes);
  // Lines 10..12 were copied to catch buffer 2 up, but did not change in this version.
  EXPECT_EQ(CollectRuns(changed), (Runs{{63, 2}, {500, 1}, {7 * 64 + 63, 1}}));
  EXPECT_EQ(CollectRuns(pub.pending(0)), (Runs{{10, 3}, {63, 2}, {7 * 64 + 63, 1}}));
  EXPECT_EQ(CollectRuns(pub.pending(1)), (Runs{{63, 2}, {7 * 64 + 63, 1}}));
  EXPECT_TRUE(pub.pending(2).Empty());
}

TEST(VersionPublisherTest, FastPathMarksArePublished) {
  // dsm_log() marks with dsm__mark_line from dsm.h, with no ChangeLog call.
  const size_t area = 4 * 4096;
  std::vector<uint8_t> writer(area);
  for (size_t i = 0; i < area; ++i) writer[i] = static_cast<uint8_t>(i * 13 + 5);
  std::vector<uint8_t> buf(area, 0);
  VersionPublisher pub(area, 2);
  ChangeLog dirty(area);
  for (size_t line : {size_t{2}, size_t{64}, size_t{255}}) {
    dsm__mark_line(dirty.bits(), dirty.summary(), line);
  }
  EXPECT_EQ(pub.Publish(dirty, 1, writer.data(), buf.data()), 3 * kLineBytes);
  for (size_t line = 0; line < area / kLineBytes; ++line) {
    const bool copied = line == 2 || line == 64 || line == 255;
    const uint8_t* got = buf.data() + line * kLineBytes;
    if (copied) {
      EXPECT_EQ(std::memcmp(got, writer.data() + line * kLineBytes, kLineBytes), 0) << line;
    } else {
      EXPECT_TRUE(std::all_of(got, got + kLineBytes, [](uint8_t b) { return b == 0; })) << line;
    }
  }
  EXPECT_TRUE(dirty.Empty());
  EXPECT_EQ(dirty.bits()[64 / 8], 0);
}

// --- VersionPublisher: randomized model -------------------------------------------

// (buffer count, area bytes). The areas have a partial last line and, for the larger
// two, a partial last page; the largest spans more than one 8-page summary word.
class VersionPublisherModelTest : public testing::TestWithParam<std::tuple<uint32_t, size_t>> {};

TEST_P(VersionPublisherModelTest, EveryPublishedBufferEqualsTheWriterCopy) {
  const auto [n, area] = GetParam();
  const int iterations = area > 100000 ? 250 : 1200;
  std::mt19937_64 rng(0x5eed1000 + n * 1000003 + area);
  const size_t lines = (area + kLineBytes - 1) / kLineBytes;
  const size_t rounded = RoundUpToLines(area);

  std::vector<uint8_t> writer(rounded);
  for (uint8_t& b : writer) b = static_cast<uint8_t>(rng());
  // Every buffer starts as a copy of the writer, followed by a canary after the
  // last whole line: Publish may write up to there, never past it.
  std::vector<std::vector<uint8_t>> buffers(n, writer);
  for (auto& b : buffers) b.resize(rounded + kCanaryBytes, kCanary);

  VersionPublisher pub(area, n);
  ChangeLog dirty(area);
  std::vector<bool> dirty_model(lines);
  std::vector<std::vector<bool>> pending_model(n, std::vector<bool>(lines));
  std::vector<bool> written(n);
  uint64_t latest_word = PackLatest(0, 0);
  // With three or more buffers, one reader holds the last buffer for the first half:
  // that buffer misses many versions and must catch up in a single publish.
  const bool held = n >= 3;
  const uint32_t held_buffer = n - 1;
  int publishes = 0, refusals = 0, held_catch_ups = 0;

  for (int iter = 0; iter < iterations; ++iter) {
    SCOPED_TRACE(testing::Message() << "iteration " << iter);
    // The writer: 0..3 logged writes; zero exercises a publish of an empty log.
    const int writes = static_cast<int>(rng() % 4);
    for (int w = 0; w < writes; ++w) {
      const size_t offset = rng() % area;
      const int kind = static_cast<int>(rng() % 8);
      const size_t len = kind < 5 ? 1 + rng() % 16 : kind < 7 ? 1 + rng() % 600 : 1 + rng() % area;
      const size_t end = std::min(area, offset + len);  // the log clips; so does memory
      for (size_t i = offset; i < end; ++i) writer[i] = static_cast<uint8_t>(rng() % 4);
      dirty.MarkBytes(offset, len);
      for (size_t line = offset / kLineBytes; line <= (end - 1) / kLineBytes; ++line) {
        dirty_model[line] = true;
      }
    }

    const LatestVersion latest = UnpackLatest(latest_word);
    uint32_t pinned = 0;
    for (uint32_t b = 0; b < n; ++b) {
      if (rng() % 100 < 35) pinned |= 1u << b;
    }
    const bool holding = held && iter < iterations / 2;
    if (holding) pinned |= 1u << held_buffer;

    const int target = PickTargetBuffer(n, latest.buffer, pinned);
    bool any_spare = false;
    for (uint32_t b = 0; b < n; ++b) any_spare |= b != latest.buffer && !(pinned & (1u << b));
    ASSERT_EQ(target >= 0, any_spare);
    if (target < 0) {
      ++refusals;  // the writer keeps its log and tries again at its next sync
      continue;
    }
    const uint32_t t = static_cast<uint32_t>(target);
    ASSERT_LT(t, n);
    ASSERT_NE(t, latest.buffer);
    ASSERT_EQ(pinned & (1u << t), 0u);

    size_t expected_bytes = 0;
    for (size_t line = 0; line < lines; ++line) {
      if (pending_model[t][line] || dirty_model[line]) expected_bytes += kLineBytes;
    }
    if (held && t == held_buffer && !written[t] && iter >= iterations / 2) ++held_catch_ups;
    const std::vector<std::vector<uint8_t>> before = buffers;

    EXPECT_EQ(pub.Publish(dirty, t, writer.data(), buffers[t].data()), expected_bytes);
    ++publishes;

    ASSERT_EQ(std::memcmp(buffers[t].data(), writer.data(), rounded), 0);
    for (uint32_t b = 0; b < n; ++b) {
      ASSERT_TRUE(std::all_of(buffers[b].begin() + rounded, buffers[b].end(),
                              [](uint8_t x) { return x == kCanary; }))
          << "canary of buffer " << b;
      if (b != t) {
        ASSERT_EQ(buffers[b], before[b]) << "buffer " << b << " changed";
      }
    }
    EXPECT_TRUE(dirty.Empty());

    for (uint32_t b = 0; b < n; ++b) {
      if (b == t) {
        pending_model[b].assign(lines, false);
      } else {
        for (size_t line = 0; line < lines; ++line) {
          pending_model[b][line] = pending_model[b][line] || dirty_model[line];
        }
      }
    }
    dirty_model.assign(lines, false);
    for (uint32_t b = 0; b < n; ++b) {
      ASSERT_EQ(CollectRuns(pub.pending(b)), ModelRuns(pending_model[b])) << "pending of " << b;
      // Whatever a buffer lacks must be pending, or a later publish leaves it stale.
      for (size_t line = 0; line < lines; ++line) {
        const size_t at = line * kLineBytes;
        if (std::memcmp(buffers[b].data() + at, writer.data() + at, kLineBytes)) {
          ASSERT_TRUE(pub.pending(b).Test(line)) << "buffer " << b << " line " << line;
        }
      }
    }

    written[t] = true;
    latest_word = PackLatest(latest.version + 1, t);
    ASSERT_EQ(UnpackLatest(latest_word).version, static_cast<uint64_t>(publishes));
    ASSERT_EQ(UnpackLatest(latest_word).buffer, t);
  }

  // The schedule must actually have exercised refusals, catch-up and every buffer.
  EXPECT_GT(publishes, iterations / 3);
  EXPECT_GT(refusals, 0);
  if (held) {
    EXPECT_EQ(held_catch_ups, 1);
  }
  EXPECT_EQ(static_cast<size_t>(std::count(written.begin(), written.end(), true)), n);
}

INSTANTIATE_TEST_SUITE_P(BuffersAndAreas, VersionPublisherModelTest,
                         testing::Combine(testing::Values(2u, 3u, 4u),
                                          testing::Values(size_t{100}, size_t{3 * 4096 + 100},
                                                          size_t{65 * 4096 + 1})),
                         [](const testing::TestParamInfo<std::tuple<uint32_t, size_t>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "buffers_" +
                                  std::to_string(std::get<1>(info.param)) + "bytes";
                         });

}  // namespace
}  // namespace dsm
