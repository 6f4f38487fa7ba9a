#include "coherence/staged_lines.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "coherence/version_publisher.h"

namespace dsm {
namespace {

// A stage of its own memory, shaped like the one in shared memory.
struct TestStage {
  TestStage(size_t area_bytes, size_t max_lines, size_t max_runs)
      : runs(max_runs), bytes(max_lines * kLineBytes), masks((area_bytes / kLineBytes + 63) / 64) {}
  StageMemory memory() {
    return {runs.data(),  runs.size(), bytes.data(), bytes.size() / kLineBytes,
            masks.data(), masks.size()};
  }
  std::vector<LineRun> runs;
  std::vector<uint8_t> bytes;
  std::vector<uint64_t> masks;
};

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

constexpr size_t kArea = 64 * 1024;  // 1,024 lines, 16 pages
constexpr size_t kLines = kArea / kLineBytes;

TEST(StageChangesTest, GathersTheLoggedLinesInAddressOrderAsRuns) {
  std::mt19937_64 rng(1);
  const std::vector<uint8_t> src = RandomBytes(kArea, rng);
  ChangeLog log(kArea);
  // Lines 3, 62..66 (one run across a page boundary), 500, 1023.
  log.MarkLines(1023, 1);
  log.MarkLines(62, 5);
  log.MarkLines(3, 1);
  log.MarkLines(500, 1);
  TestStage stage(kArea, 64, 64);
  const StagedCounts c = StageChanges(log, src.data(), stage.memory());
  EXPECT_FALSE(c.as_masks);
  EXPECT_EQ(c.lines, 8u);
  ASSERT_EQ(c.runs, 4u);
  const std::vector<std::pair<uint32_t, uint32_t>> want = {{3, 1}, {62, 5}, {500, 1}, {1023, 1}};
  size_t at = 0;
  for (size_t r = 0; r < c.runs; ++r) {
    EXPECT_EQ(stage.runs[r].first_line, want[r].first);
    EXPECT_EQ(stage.runs[r].line_count, want[r].second);
    const size_t n = size_t{want[r].second} * kLineBytes;
    EXPECT_EQ(std::memcmp(stage.bytes.data() + at, src.data() + want[r].first * kLineBytes, n), 0)
        << "run " << r;
    at += n;
  }
  EXPECT_TRUE(log.Empty());
  EXPECT_TRUE(
      std::all_of(stage.masks.begin(), stage.masks.end(), [](uint64_t m) { return m == 0; }));
}

// The lines a stage holds as masks, as a sorted list.
std::vector<size_t> MaskLines(const std::vector<uint64_t>& masks) {
  std::vector<size_t> lines;
  for (size_t page = 0; page < masks.size(); ++page) {
    for (size_t i = 0; i < 64; ++i) {
      if ((masks[page] >> i) & 1) lines.push_back(page * 64 + i);
    }
  }
  return lines;
}

TEST(StageChangesTest, AVersionWithMoreLinesThanTheStageHoldsGoesAsMasks) {
  std::mt19937_64 rng(2);
  const std::vector<uint8_t> src = RandomBytes(kArea, rng);
  ChangeLog log(kArea);
  std::vector<size_t> want;
  for (size_t line = 0; line < kLines; line += 3) {
    log.MarkLines(line, 1);
    want.push_back(line);
  }
  TestStage stage(kArea, 100, 1000);  // 342 lines logged, room for 100
  const StagedCounts c = StageChanges(log, src.data(), stage.memory());
  EXPECT_TRUE(c.as_masks);
  EXPECT_EQ(c.lines, want.size());
  EXPECT_EQ(MaskLines(stage.masks), want);
  EXPECT_TRUE(log.Empty());
}

TEST(StageChangesTest, AVersionWithMoreRunsThanTheStageHoldsGoesAsMasks) {
  std::mt19937_64 rng(3);
  const std::vector<uint8_t> src = RandomBytes(kArea, rng);
  ChangeLog log(kArea);
  std::vector<size_t> want;
  for (size_t line = 0; line < 40; line += 2) {  // 20 runs of one line
    log.MarkLines(line, 1);
    want.push_back(line);
  }
  TestStage stage(kArea, 1000, 10);
  const StagedCounts c = StageChanges(log, src.data(), stage.memory());
  EXPECT_TRUE(c.as_masks);
  EXPECT_EQ(MaskLines(stage.masks), want);
}

TEST(StageChangesTest, AWithdrawnVersionsMasksAreJoinedNotReplaced) {
  std::mt19937_64 rng(4);
  const std::vector<uint8_t> src = RandomBytes(kArea, rng);
  TestStage stage(kArea, 1000, 1000);
  stage.masks[0] = 0b101;  // lines 0 and 2, withdrawn earlier
  ChangeLog log(kArea);
  log.MarkLines(70, 1);
  const StagedCounts c = StageChanges(log, src.data(), stage.memory(), /*as_masks=*/true);
  EXPECT_TRUE(c.as_masks);
  EXPECT_EQ(MaskLines(stage.masks), (std::vector<size_t>{0, 2, 70}));
}

TEST(StagedRunsTest, AddRunsInOrderAddsExactlyTheLinesOfAStagesRuns) {
  std::mt19937_64 rng(0xadd5);
  // A partial last page (and line): runs that end at the area's last line.
  const size_t area_bytes = 300 * kLinesPerPage * kLineBytes + 5 * kLineBytes + 17;
  const size_t lines = (area_bytes + kLineBytes - 1) / kLineBytes;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<LineRun> runs;
    size_t at = rng() % 70;
    while (at < lines) {
      // Single lines, short runs, whole pages and runs across pages.
      const size_t kinds[] = {1, 1 + rng() % 5, kLinesPerPage, 1 + rng() % 300};
      const size_t count = std::min(kinds[rng() % 4], lines - at);
      runs.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(count)});
      at += count + 1 + (trial % 2 == 0 ? rng() % 3 : rng() % 500);
    }
    LineSet expected(area_bytes), got(area_bytes);
    for (const LineRun& r : runs) expected.AddLines(r.first_line, r.line_count);
    got.AddRunsInOrder(runs);
    ASSERT_TRUE(got.SameLines(expected)) << "trial " << trial;
    ASSERT_EQ(got.CountLines(), expected.CountLines());
  }
}

TEST(StageChangesTest, TakeMasksMovesThemIntoTheSetAndLeavesThemZero) {
  TestStage stage(kArea, 64, 64);
  stage.masks[1] = 0xf0;
  stage.masks[15] = uint64_t{1} << 63;
  LineSet set(kArea);
  TakeMasks(stage.masks.data(), stage.masks.size(), &set);
  std::vector<std::pair<size_t, size_t>> runs;
  set.ForEachRun([&](size_t first, size_t count) { runs.emplace_back(first, count); });
  EXPECT_EQ(runs, (std::vector<std::pair<size_t, size_t>>{{68, 4}, {1023, 1}}));
  EXPECT_TRUE(
      std::all_of(stage.masks.begin(), stage.masks.end(), [](uint64_t m) { return m == 0; }));
}

// The writer stages versions and goes on writing; "dsmd" applies each later
// into a buffer that readers do not pin, or (no reader on the host) into the
// latest buffer in place. Every applied buffer must equal the writer copy as
// it was when that version was posted, whatever the writer wrote since,
// whichever buffers were pinned, posted as lines or as masks.
class StagedPublishModelTest : public testing::TestWithParam<uint32_t> {};

TEST_P(StagedPublishModelTest, EveryAppliedBufferEqualsTheWriterCopyAtItsPost) {
  const uint32_t n = GetParam();
  std::mt19937_64 rng(0x57a9ed + n);
  std::vector<uint8_t> writer = RandomBytes(kArea, rng);
  std::vector<std::vector<uint8_t>> buffers(n, writer);
  VersionPublisher pub(kArea, n);
  ChangeLog log(kArea);
  TestStage stage(kArea, StageCapacityLines(kLines), StageCapacityLines(kLines));
  uint32_t latest = 0;
  int as_lines = 0, as_masks = 0, caught_up = 0, written_in_place = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    SCOPED_TRACE(testing::Message() << "iteration " << iter);
    // Mostly sparse versions; now and then one too large for the stage.
    const bool dense = rng() % 10 == 0;
    const int writes = dense ? 200 : 1 + static_cast<int>(rng() % 20);
    for (int w = 0; w < writes; ++w) {
      const size_t line = rng() % kLines;
      const size_t count = 1 + rng() % 3;
      for (size_t i = line * kLineBytes; i < std::min(kArea, (line + count) * kLineBytes); ++i) {
        writer[i] = static_cast<uint8_t>(rng());
      }
      log.MarkLines(line, count);
    }
    const StagedCounts c = StageChanges(log, writer.data(), stage.memory());
    const std::vector<uint8_t> posted = writer;  // the version's content
    if (!c.as_masks) {
      // dsmd has not taken it yet: the writer writes on (its copy and its
      // log, for the next version; not the stage).
      for (int w = 0; w < 5; ++w) {
        const size_t at = rng() % kArea;
        writer[at] = static_cast<uint8_t>(rng());
        log.MarkBytes(at, 1);
      }
    }
    uint32_t pinned = 0;
    for (uint32_t b = 0; b < n; ++b) {
      if (rng() % 100 < 30) pinned |= 1u << b;
    }
    // No reader on the host now and then: dsmd writes the latest buffer in
    // place, and the spares lack everything until their next publish.
    const bool in_place = !c.as_masks && rng() % 3 == 0;
    int target = in_place ? static_cast<int>(latest) : PickTargetBuffer(n, latest, pinned);
    if (target < 0) target = PickTargetBuffer(n, latest, 0);  // readers let go: dsmd retries
    const auto t = static_cast<uint32_t>(target);
    if (in_place) {
      pub.PublishRunsInPlace(std::span<const LineRun>(stage.runs.data(), c.runs),
                             stage.bytes.data(), t, buffers[t].data());
      ++written_in_place;
    } else if (c.as_masks) {
      LineSet lines(kArea);
      TakeMasks(stage.masks.data(), stage.masks.size(), &lines);
      pub.PublishLines(lines, t, posted.data(), buffers[t].data());  // the writer waits
      ++as_masks;
    } else {
      pub.PublishRuns(std::span<const LineRun>(stage.runs.data(), c.runs), stage.bytes.data(), t,
                      buffers[latest].data(), buffers[t].data());
      ++as_lines;
    }
    ASSERT_EQ(buffers[t], posted) << "buffer " << t;
    latest = t;
    const int next = PickTargetBuffer(n, latest, pinned & ~(1u << latest));
    if (next >= 0 && rng() % 2 == 0 && pub.CatchUpWorthwhile(static_cast<uint32_t>(next))) {
      pub.CatchUp(static_cast<uint32_t>(next), buffers[latest].data(),
                  buffers[static_cast<uint32_t>(next)].data());
      ASSERT_EQ(buffers[static_cast<uint32_t>(next)], posted) << "caught-up buffer " << next;
      ++caught_up;
    }
  }
  EXPECT_GT(as_lines, 600);
  EXPECT_GT(as_masks, 50);
  EXPECT_GT(caught_up, 100);
  EXPECT_GT(written_in_place, 300);
}

INSTANTIATE_TEST_SUITE_P(Buffers, StagedPublishModelTest, testing::Values(2u, 3u, 4u));

}  // namespace
}  // namespace dsm
