#include "coherence/change_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace dsm {
namespace {

using Run = std::pair<size_t, size_t>;  // (first line, count)
using Runs = std::vector<Run>;

Runs CollectRuns(const ChangeLog& log) {
  Runs runs;
  log.ForEachRun([&](size_t first, size_t count) { runs.emplace_back(first, count); });
  return runs;
}

// The maximal runs of a plain per-line model, in order: what ForEachRun must report.
Runs ModelRuns(const std::vector<bool>& model) {
  Runs runs;
  for (size_t i = 0; i < model.size();) {
    if (!model[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < model.size() && model[j]) ++j;
    runs.emplace_back(i, j - i);
    i = j;
  }
  return runs;
}

// Checks every read-side view of `log` against the model.
void ExpectMatchesModel(const ChangeLog& log, const std::vector<bool>& model) {
  ASSERT_EQ(log.lines(), model.size());
  size_t marked = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    ASSERT_EQ(log.Test(i), model[i]) << "line " << i;
    marked += model[i];
  }
  EXPECT_FALSE(log.Test(model.size()));
  EXPECT_EQ(log.CountLines(), marked);
  EXPECT_EQ(log.Empty(), marked == 0);
  EXPECT_EQ(CollectRuns(log), ModelRuns(model));
}

void ModelMarkBytes(std::vector<bool>& model, size_t area_bytes, size_t offset, size_t len) {
  for (size_t line = 0; line < model.size(); ++line) {
    const size_t begin = line * kLineBytes;
    const size_t end = std::min(begin + kLineBytes, area_bytes);
    // Overlap of [offset, offset + len) with [begin, end), written to avoid overflow.
    if (len != 0 && offset < end && begin - std::min(begin, offset) < len) model[line] = true;
  }
}

TEST(ChangeLogTest, LayoutConstantsMatchTheCHeader) {
  // dsm_log() in dsm.h indexes these bytes directly; the C++ side must agree.
  EXPECT_EQ(kLineBytes, 64u);
  EXPECT_EQ(kLinesPerPage, 64u);
  EXPECT_EQ(kLineBytes * kLinesPerPage, kPageBytes);
}

TEST(ChangeLogTest, GeometryRoundsPartialLinesAndPagesUp) {
  struct Case {
    size_t area_bytes, lines, pages;
  };
  const Case cases[] = {
      {0, 0, 0},
      {1, 1, 1},
      {63, 1, 1},
      {64, 1, 1},
      {65, 2, 1},
      {4095, 64, 1},
      {4096, 64, 1},
      {4097, 65, 2},
      {3 * 4096 + 100, 194, 4},
      {size_t{64} << 20, size_t{1} << 20, size_t{1} << 14},
  };
  for (const Case& c : cases) {
    ChangeLog log(c.area_bytes);
    EXPECT_EQ(log.lines(), c.lines) << c.area_bytes;
    EXPECT_EQ(log.pages(), c.pages) << c.area_bytes;
  }
}

TEST(ChangeLogTest, NewLogIsEmpty) {
  ChangeLog log(3 * 4096 + 100);
  ExpectMatchesModel(log, std::vector<bool>(log.lines()));
}

TEST(ChangeLogTest, MarkLinesSetsExactlyThoseLines) {
  ChangeLog log(4 * 4096);
  std::vector<bool> model(log.lines());
  log.MarkLines(3, 2);
  model[3] = model[4] = true;
  log.MarkLines(100, 1);
  model[100] = true;
  ExpectMatchesModel(log, model);
}

TEST(ChangeLogTest, MarkingTwiceIsIdempotent) {
  ChangeLog log(4096);
  log.MarkLines(10, 5);
  log.MarkLines(10, 5);
  log.MarkBytes(10 * 64, 5 * 64);
  EXPECT_EQ(log.CountLines(), 5u);
  EXPECT_EQ(CollectRuns(log), (Runs{{10, 5}}));
}

TEST(ChangeLogTest, ClearRemovesEveryMarkAndTheLogIsReusable) {
  ChangeLog log(10 * 4096 + 1);
  log.MarkLines(0, 1);
  log.MarkLines(63, 2);
  log.MarkLines(300, 200);
  log.MarkLines(log.lines() - 1, 1);
  ASSERT_FALSE(log.Empty());
  log.Clear();
  ExpectMatchesModel(log, std::vector<bool>(log.lines()));
  // The raw bytes are what dsm_log() and later scans read, so they must be zero too.
  for (size_t i = 0; i < log.pages() * kLinesPerPage; ++i) ASSERT_EQ(log.line_bytes()[i], 0) << i;
  for (size_t p = 0; p < log.pages(); ++p) ASSERT_EQ(log.page_bytes()[p], 0) << p;

  log.MarkLines(64, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{64, 1}}));
}

TEST(ChangeLogTest, MarkLinesClipsAtTheEnd) {
  ChangeLog log(1000);  // 16 lines, the last one partial
  ASSERT_EQ(log.lines(), 16u);
  log.MarkLines(14, 100);
  EXPECT_EQ(CollectRuns(log), (Runs{{14, 2}}));
  log.Clear();
  log.MarkLines(3, SIZE_MAX);  // first + count would overflow
  EXPECT_EQ(CollectRuns(log), (Runs{{3, 13}}));
}

TEST(ChangeLogTest, MarkLinesOutOfRangeOrEmptyIsIgnored) {
  ChangeLog log(1000);
  log.MarkLines(16, 1);
  log.MarkLines(SIZE_MAX, 1);
  log.MarkLines(SIZE_MAX, SIZE_MAX);
  log.MarkLines(5, 0);
  ExpectMatchesModel(log, std::vector<bool>(log.lines()));
  // Must check the bound, not index past the bytes.
  EXPECT_FALSE(log.Test(log.lines() + (size_t{1} << 40)));
  EXPECT_FALSE(log.Test(SIZE_MAX));
}

TEST(ChangeLogTest, MarkBytesMarksEveryTouchedLine) {
  ChangeLog log(4096);
  log.MarkBytes(0, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{0, 1}}));
  log.Clear();
  log.MarkBytes(63, 2);  // straddles lines 0 and 1
  EXPECT_EQ(CollectRuns(log), (Runs{{0, 2}}));
  log.Clear();
  log.MarkBytes(64, 64);  // exactly line 1, touches neither neighbour
  EXPECT_EQ(CollectRuns(log), (Runs{{1, 1}}));
  log.Clear();
  log.MarkBytes(127, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{1, 1}}));
  log.Clear();
  log.MarkBytes(100, 1000);  // bytes 100..1099: lines 1..17
  EXPECT_EQ(CollectRuns(log), (Runs{{1, 17}}));
}

TEST(ChangeLogTest, MarkBytesWithZeroLengthMarksNothing) {
  ChangeLog log(1000);
  log.MarkBytes(0, 0);
  log.MarkBytes(64, 0);  // a line start: would be line 0 if len - 1 wrapped
  log.MarkBytes(999, 0);
  log.MarkBytes(1000, 0);
  ExpectMatchesModel(log, std::vector<bool>(log.lines()));
}

TEST(ChangeLogTest, MarkBytesAtTheLastByte) {
  ChangeLog log(1000);  // last line covers bytes 960..999
  log.MarkBytes(999, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{15, 1}}));
  log.Clear();
  log.MarkBytes(999, 100);  // runs past the end: clipped to the last line
  EXPECT_EQ(CollectRuns(log), (Runs{{15, 1}}));
  log.Clear();
  log.MarkBytes(950, 1000);
  EXPECT_EQ(CollectRuns(log), (Runs{{14, 2}}));
}

TEST(ChangeLogTest, MarkBytesPastTheEndIsClippedOrIgnored) {
  ChangeLog log(1000);
  log.MarkBytes(1000, 1);  // the partial last line covers bytes 960..999 only
  log.MarkBytes(1010, 50);
  log.MarkBytes(1024, 1);  // first line past the area
  log.MarkBytes(5000, 64);
  log.MarkBytes(SIZE_MAX, 1);
  ExpectMatchesModel(log, std::vector<bool>(log.lines()));
  log.MarkBytes(500, 10000);
  EXPECT_EQ(CollectRuns(log), (Runs{{7, 9}}));
}

TEST(ChangeLogTest, MarkBytesWithHugeLengthDoesNotWrapAround) {
  // offset + len overflows size_t here; the range still covers everything after
  // offset, so it must be clipped to the area, not wrapped to a few low lines.
  ChangeLog log(4096 * 3);
  log.MarkBytes(10, SIZE_MAX);
  EXPECT_EQ(CollectRuns(log), (Runs{{0, log.lines()}}));
  log.Clear();
  log.MarkBytes(200, SIZE_MAX - 50);
  EXPECT_EQ(CollectRuns(log), (Runs{{3, log.lines() - 3}}));
  log.Clear();
  log.MarkBytes(4096 * 3 - 1, SIZE_MAX);
  EXPECT_EQ(CollectRuns(log), (Runs{{log.lines() - 1, 1}}));
  log.Clear();
  log.MarkBytes(SIZE_MAX - 5, SIZE_MAX);
  EXPECT_TRUE(log.Empty());
}

TEST(ChangeLogTest, MarkBytesSpanningTheWholeAreaIsOneRun) {
  for (size_t area : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4095}, size_t{4096},
                      size_t{4097}, size_t{9 * 4096 + 17}}) {
    ChangeLog log(area);
    log.MarkBytes(0, area);
    EXPECT_EQ(CollectRuns(log), (Runs{{0, log.lines()}})) << area;
    EXPECT_EQ(log.CountLines(), log.lines()) << area;
  }
}

TEST(ChangeLogTest, OneByteArea) {
  ChangeLog log(1);
  ASSERT_EQ(log.lines(), 1u);
  log.MarkBytes(1, 1);  // past the end
  EXPECT_TRUE(log.Empty());
  log.MarkBytes(0, 1000);
  ExpectMatchesModel(log, {true});
  log.Clear();
  ExpectMatchesModel(log, {false});
}

TEST(ChangeLogTest, ZeroByteAreaIgnoresEverything) {
  ChangeLog log(0);
  log.MarkBytes(0, 100);
  log.MarkLines(0, 1);
  EXPECT_TRUE(log.Empty());
  EXPECT_EQ(log.CountLines(), 0u);
  EXPECT_TRUE(CollectRuns(log).empty());
  ChangeLog other(0);
  log.Merge(other);
  log.Clear();
  EXPECT_TRUE(log.Empty());
}

// --- Runs -------------------------------------------------------------------------

TEST(ChangeLogRunsTest, AdjacentMarksFormOneRun) {
  ChangeLog log(4096);
  log.MarkLines(5, 1);
  log.MarkLines(6, 1);
  log.MarkLines(7, 1);  // crosses the 8-line word boundary inside a page
  log.MarkLines(8, 1);
  log.MarkLines(10, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{5, 4}, {10, 1}}));
}

TEST(ChangeLogRunsTest, RunSpanningAPageBoundaryIsOneRun) {
  ChangeLog log(4 * 4096);
  log.MarkLines(60, 11);  // lines 60..70, pages 0 and 1
  EXPECT_EQ(CollectRuns(log), (Runs{{60, 11}}));
}

TEST(ChangeLogRunsTest, RunMadeOfTwoMarksOnEitherSideOfAPageBoundary) {
  ChangeLog log(4 * 4096);
  log.MarkLines(63, 1);
  log.MarkLines(64, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{63, 2}}));
}

TEST(ChangeLogRunsTest, RunSpanningManyPagesIsOneRun) {
  ChangeLog log(20 * 4096);
  log.MarkLines(50, 1000);  // pages 0..16, fully covering 1..15
  EXPECT_EQ(CollectRuns(log), (Runs{{50, 1000}}));
}

TEST(ChangeLogRunsTest, RunAcrossAnEightPageSummaryWord) {
  // Pages 7 and 8 sit in different 8-byte words of the summary.
  ChangeLog log(20 * 4096);
  log.MarkLines(7 * 64 + 60, 10);
  EXPECT_EQ(CollectRuns(log), (Runs{{7 * 64 + 60, 10}}));
}

TEST(ChangeLogRunsTest, RunEndingAtAPageEndWithCleanNextPageIsClosed) {
  ChangeLog log(4 * 4096);
  log.MarkLines(0, 64);
  log.MarkLines(128, 3);
  EXPECT_EQ(CollectRuns(log), (Runs{{0, 64}, {128, 3}}));
}

TEST(ChangeLogRunsTest, RunEndingAtAPageEndIsNotJoinedToANonAdjacentLineOfTheNextPage) {
  ChangeLog log(4 * 4096);
  log.MarkLines(60, 4);  // ends at line 63, the page's last
  log.MarkLines(65, 1);  // next page is dirty but its first line is clean
  EXPECT_EQ(CollectRuns(log), (Runs{{60, 4}, {65, 1}}));
}

TEST(ChangeLogRunsTest, RunEndingAtTheLastLine) {
  ChangeLog log(3 * 4096 + 100);  // partial last line and partial last page
  const size_t last = log.lines() - 1;
  log.MarkLines(last - 5, 6);
  EXPECT_EQ(CollectRuns(log), (Runs{{last - 5, 6}}));
  log.Clear();
  log.MarkLines(last, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{last, 1}}));
}

TEST(ChangeLogRunsTest, RunEndingAtTheLastLineOfAFullLastPage) {
  ChangeLog log(4 * 4096);
  log.MarkLines(3 * 64 - 2, 66);  // lines 190..255, crossing into the last page
  EXPECT_EQ(CollectRuns(log), (Runs{{190, 66}}));
}

TEST(ChangeLogRunsTest, AlternatingLinesAreSeparateRuns) {
  ChangeLog log(3 * 4096 + 100);
  std::vector<bool> model(log.lines());
  for (size_t i = 0; i < log.lines(); i += 2) {
    log.MarkLines(i, 1);
    model[i] = true;
  }
  const Runs runs = CollectRuns(log);
  EXPECT_EQ(runs.size(), (log.lines() + 1) / 2);
  ExpectMatchesModel(log, model);

  // The complementary pattern: odd lines, ending at the last line since lines() is even.
  ASSERT_EQ(log.lines() % 2, 0u);
  log.Clear();
  model.assign(log.lines(), false);
  for (size_t i = 1; i < log.lines(); i += 2) {
    log.MarkLines(i, 1);
    model[i] = true;
  }
  ExpectMatchesModel(log, model);
}

TEST(ChangeLogRunsTest, WholeAreaIsOneRun) {
  ChangeLog log(7 * 4096 + 1);
  log.MarkLines(0, log.lines());
  EXPECT_EQ(CollectRuns(log), (Runs{{0, log.lines()}}));
}

TEST(ChangeLogRunsTest, IsolatedDirtyPageAfterManyCleanPages) {
  // Page 9 is reached through the summary word that starts at page 8.
  ChangeLog log(40 * 4096);
  log.MarkLines(9 * 64 + 3, 1);
  log.MarkLines(39 * 64 + 63, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{9 * 64 + 3, 1}, {39 * 64 + 63, 1}}));
}

TEST(ChangeLogRunsTest, RandomMarksMatchAPerLineModel) {
  std::mt19937_64 rng(0x5eed0001);
  const size_t areas[] = {1, 63, 64, 65, 4095, 4096, 4097, 3 * 4096 + 100, 65 * 4096 + 1};
  for (size_t area : areas) {
    for (int round = 0; round < 20; ++round) {
      ChangeLog log(area);
      std::vector<bool> model(log.lines());
      // Alternate sparse and dense rounds so both long runs and lone lines appear.
      const int marks = round % 2 == 0 ? 3 : 60;
      for (int m = 0; m < marks; ++m) {
        if (rng() % 2 == 0) {
          const size_t first = rng() % (log.lines() + 2);
          const size_t count = rng() % 80;
          log.MarkLines(first, count);
          for (size_t i = first; i < first + count && i < model.size(); ++i) model[i] = true;
        } else {
          const size_t offset = rng() % (area + 100);
          const size_t len = rng() % 300;
          log.MarkBytes(offset, len);
          ModelMarkBytes(model, area, offset, len);
        }
      }
      SCOPED_TRACE(testing::Message() << "area " << area << " round " << round);
      ExpectMatchesModel(log, model);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

// --- Merge and Clear --------------------------------------------------------------

TEST(ChangeLogMergeTest, MergeIsAUnionAndLeavesTheSourceAlone) {
  std::mt19937_64 rng(0x5eed0002);
  const size_t area = 9 * 4096 + 33;
  for (int round = 0; round < 50; ++round) {
    ChangeLog a(area), b(area);
    std::vector<bool> ma(a.lines()), mb(b.lines());
    for (int m = 0; m < 20; ++m) {
      const size_t la = rng() % a.lines(), lb = rng() % b.lines();
      const size_t ca = 1 + rng() % 70, cb = 1 + rng() % 70;
      a.MarkLines(la, ca);
      b.MarkLines(lb, cb);
      for (size_t i = la; i < la + ca && i < ma.size(); ++i) ma[i] = true;
      for (size_t i = lb; i < lb + cb && i < mb.size(); ++i) mb[i] = true;
    }
    a.Merge(b);
    std::vector<bool> both(ma.size());
    for (size_t i = 0; i < both.size(); ++i) both[i] = ma[i] || mb[i];
    ExpectMatchesModel(a, both);
    ExpectMatchesModel(b, mb);
    if (HasFatalFailure()) return;
  }
}

TEST(ChangeLogMergeTest, MergeIntoEmptyCopiesAndMergeOfEmptyIsANoOp) {
  ChangeLog a(4 * 4096), b(4 * 4096);
  b.MarkLines(62, 4);
  b.MarkLines(255, 1);
  a.Merge(b);
  EXPECT_EQ(CollectRuns(a), (Runs{{62, 4}, {255, 1}}));

  ChangeLog empty(4 * 4096);
  a.Merge(empty);
  EXPECT_EQ(CollectRuns(a), (Runs{{62, 4}, {255, 1}}));
}

TEST(ChangeLogMergeTest, MergedLogClearsFully) {
  // Merge must raise the summary bytes of the pages it fills, or Clear and scans
  // would skip them.
  ChangeLog a(8 * 4096), b(8 * 4096);
  b.MarkLines(5 * 64 + 1, 1);
  a.Merge(b);
  EXPECT_FALSE(a.Empty());
  EXPECT_EQ(a.page_bytes()[5], 1);
  a.Clear();
  EXPECT_TRUE(a.Empty());
  EXPECT_EQ(a.line_bytes()[5 * 64 + 1], 0);
}

// The two tests below show that Merge and Clear walk the summary and never sweep a
// clean page: a line byte set behind the summary's back is invisible to them. That
// is what makes their cost follow the dirty pages rather than the area size.
TEST(ChangeLogMergeTest, MergeReadsOnlyPagesMarkedDirtyInTheSource) {
  ChangeLog a(8 * 4096), b(8 * 4096);
  b.line_bytes()[3 * 64 + 7] = 1;  // no summary byte: page 3 counts as clean
  b.MarkLines(6 * 64, 1);
  a.Merge(b);
  EXPECT_FALSE(a.Test(3 * 64 + 7));
  EXPECT_TRUE(a.Test(6 * 64));
  EXPECT_EQ(a.page_bytes()[3], 0);
}

TEST(ChangeLogMergeTest, ClearTouchesOnlyPagesMarkedDirty) {
  ChangeLog log(8 * 4096);
  log.line_bytes()[2 * 64 + 5] = 1;  // no summary byte: page 2 counts as clean
  log.MarkLines(4 * 64 + 9, 1);
  log.Clear();
  EXPECT_EQ(log.line_bytes()[2 * 64 + 5], 1);
  EXPECT_EQ(log.line_bytes()[4 * 64 + 9], 0);
  EXPECT_EQ(log.page_bytes()[4], 0);
}

TEST(ChangeLogMergeTest, RawFastPathStoresAreSeenByEveryOperation) {
  // dsm_log() stores a line byte and its page byte directly, without MarkLines.
  ChangeLog log(5 * 4096), sink(5 * 4096);
  for (size_t line : {size_t{0}, size_t{64}, size_t{65}, size_t{319}}) {
    log.line_bytes()[line] = 1;
    log.page_bytes()[line / kLinesPerPage] = 1;
  }
  EXPECT_EQ(CollectRuns(log), (Runs{{0, 1}, {64, 2}, {319, 1}}));
  EXPECT_EQ(log.CountLines(), 4u);
  sink.Merge(log);
  EXPECT_EQ(CollectRuns(sink), (Runs{{0, 1}, {64, 2}, {319, 1}}));
  log.Clear();
  EXPECT_TRUE(log.Empty());
  EXPECT_EQ(log.CountLines(), 0u);
}

// --- Large areas ------------------------------------------------------------------

TEST(ChangeLogLargeTest, SixtyFourMiBAreaWithAFewMarks) {
  const size_t area = size_t{64} << 20;
  ChangeLog log(area);
  const size_t last = log.lines() - 1;
  log.MarkBytes(0, 1);
  log.MarkBytes(4096 * 1000 - 1, 2);  // straddles pages 999 and 1000
  log.MarkBytes(area - 1, 1);
  EXPECT_EQ(CollectRuns(log), (Runs{{0, 1}, {64000 - 1, 2}, {last, 1}}));
  EXPECT_EQ(log.CountLines(), 4u);

  ChangeLog other(area);
  other.MarkLines(last - 1, 1);  // joins the run at the very end
  log.Merge(other);
  EXPECT_EQ(CollectRuns(log), (Runs{{0, 1}, {64000 - 1, 2}, {last - 1, 2}}));

  log.Clear();
  EXPECT_TRUE(log.Empty());
  EXPECT_TRUE(CollectRuns(log).empty());
}

TEST(ChangeLogLargeTest, SixtyFourMiBAreaMarkedWhole) {
  const size_t area = size_t{64} << 20;
  ChangeLog log(area);
  log.MarkBytes(0, area);
  EXPECT_EQ(CollectRuns(log), (Runs{{0, log.lines()}}));
  EXPECT_EQ(log.CountLines(), log.lines());
  log.Clear();
  EXPECT_TRUE(log.Empty());
  EXPECT_EQ(log.CountLines(), 0u);
}

}  // namespace
}  // namespace dsm
