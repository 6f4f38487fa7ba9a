#include "coherence/change_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "coherence/line_set.h"

namespace dsm {
namespace {

using Run = std::pair<size_t, size_t>;  // (first line, count)
using Runs = std::vector<Run>;

// The maximal runs of a plain per-line model, in order.
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

// The marked lines of `log` as maximal runs, read line by line with Test(): a
// compact way to state what a log holds.
Runs MarkedRuns(const ChangeLog& log) {
  std::vector<bool> marked(log.lines());
  for (size_t i = 0; i < marked.size(); ++i) marked[i] = log.Test(i);
  return ModelRuns(marked);
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
}

void ModelMarkBytes(std::vector<bool>& model, size_t area_bytes, size_t offset, size_t len) {
  for (size_t line = 0; line < model.size(); ++line) {
    const size_t begin = line * kLineBytes;
    const size_t end = std::min(begin + kLineBytes, area_bytes);
    // Overlap of [offset, offset + len) with [begin, end), written to avoid overflow.
    if (len != 0 && offset < end && begin - std::min(begin, offset) < len) model[line] = true;
  }
}

// Whether line `line`'s bit is set in the raw array dsm_log() writes.
bool RawBit(ChangeLog& log, size_t line) { return (log.bits()[line / 8] >> (line % 8) & 1) != 0; }

// After Clear, TakePages or Absorb every raw byte must be zero: dsm_log() and
// later scans read them.
void ExpectRawBytesZero(ChangeLog& log) {
  for (size_t i = 0; i < log.pages() * kLinesPerPage / 8; ++i) ASSERT_EQ(log.bits()[i], 0) << i;
  const size_t groups = (log.pages() + kPagesPerSummary - 1) / kPagesPerSummary;
  for (size_t g = 0; g < groups; ++g) ASSERT_EQ(log.summary()[g], 0) << g;
}

TEST(ChangeLogTest, LayoutConstantsMatchTheCHeader) {
  // dsm_log() in dsm.h indexes these arrays directly; the C++ side must agree.
  EXPECT_EQ(kLineBytes, 64u);
  EXPECT_EQ(kLinesPerPage, 64u);
  EXPECT_EQ(kLineBytes * kLinesPerPage, kPageBytes);
  EXPECT_EQ(kLinesPerSummary, 512u);  // one 64-byte line of bits
  EXPECT_EQ(kPagesPerSummary, 8u);
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
  EXPECT_EQ(MarkedRuns(log), (Runs{{10, 5}}));
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
  ExpectRawBytesZero(log);

  log.MarkLines(64, 1);
  EXPECT_EQ(MarkedRuns(log), (Runs{{64, 1}}));
}

TEST(ChangeLogTest, MarkLinesClipsAtTheEnd) {
  ChangeLog log(1000);  // 16 lines, the last one partial
  ASSERT_EQ(log.lines(), 16u);
  log.MarkLines(14, 100);
  EXPECT_EQ(MarkedRuns(log), (Runs{{14, 2}}));
  log.Clear();
  log.MarkLines(3, SIZE_MAX);  // first + count would overflow
  EXPECT_EQ(MarkedRuns(log), (Runs{{3, 13}}));
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
  EXPECT_EQ(MarkedRuns(log), (Runs{{0, 1}}));
  log.Clear();
  log.MarkBytes(63, 2);  // straddles lines 0 and 1
  EXPECT_EQ(MarkedRuns(log), (Runs{{0, 2}}));
  log.Clear();
  log.MarkBytes(64, 64);  // exactly line 1, touches neither neighbour
  EXPECT_EQ(MarkedRuns(log), (Runs{{1, 1}}));
  log.Clear();
  log.MarkBytes(127, 1);
  EXPECT_EQ(MarkedRuns(log), (Runs{{1, 1}}));
  log.Clear();
  log.MarkBytes(100, 1000);  // bytes 100..1099: lines 1..17
  EXPECT_EQ(MarkedRuns(log), (Runs{{1, 17}}));
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
  EXPECT_EQ(MarkedRuns(log), (Runs{{15, 1}}));
  log.Clear();
  log.MarkBytes(999, 100);  // runs past the end: clipped to the last line
  EXPECT_EQ(MarkedRuns(log), (Runs{{15, 1}}));
  log.Clear();
  log.MarkBytes(950, 1000);
  EXPECT_EQ(MarkedRuns(log), (Runs{{14, 2}}));
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
  EXPECT_EQ(MarkedRuns(log), (Runs{{7, 9}}));
}

TEST(ChangeLogTest, MarkBytesWithHugeLengthDoesNotWrapAround) {
  // offset + len overflows size_t here; the range still covers everything after
  // offset, so it must be clipped to the area, not wrapped to a few low lines.
  ChangeLog log(4096 * 3);
  log.MarkBytes(10, SIZE_MAX);
  EXPECT_EQ(MarkedRuns(log), (Runs{{0, log.lines()}}));
  log.Clear();
  log.MarkBytes(200, SIZE_MAX - 50);
  EXPECT_EQ(MarkedRuns(log), (Runs{{3, log.lines() - 3}}));
  log.Clear();
  log.MarkBytes(4096 * 3 - 1, SIZE_MAX);
  EXPECT_EQ(MarkedRuns(log), (Runs{{log.lines() - 1, 1}}));
  log.Clear();
  log.MarkBytes(SIZE_MAX - 5, SIZE_MAX);
  EXPECT_TRUE(log.Empty());
}

TEST(ChangeLogTest, MarkBytesSpanningTheWholeAreaIsOneRun) {
  for (size_t area : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4095}, size_t{4096},
                      size_t{4097}, size_t{9 * 4096 + 17}}) {
    ChangeLog log(area);
    log.MarkBytes(0, area);
    EXPECT_EQ(MarkedRuns(log), (Runs{{0, log.lines()}})) << area;
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
  EXPECT_TRUE(MarkedRuns(log).empty());
  ChangeLog other(0);
  log.Absorb(other);
  log.Clear();
  EXPECT_TRUE(log.Empty());
}

TEST(ChangeLogTest, RandomMarksMatchAPerLineModel) {
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

// --- Absorb and Clear ------------------------------------------------------------

TEST(ChangeLogAbsorbTest, AbsorbIsAUnionAndEmptiesTheSource) {
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
    a.Absorb(b);
    std::vector<bool> both(ma.size());
    for (size_t i = 0; i < both.size(); ++i) both[i] = ma[i] || mb[i];
    ExpectMatchesModel(a, both);
    ExpectMatchesModel(b, std::vector<bool>(b.lines()));
    ExpectRawBytesZero(b);
    if (HasFatalFailure()) return;
  }
}

TEST(ChangeLogAbsorbTest, AbsorbIntoEmptyMovesAndAbsorbOfEmptyIsANoOp) {
  ChangeLog a(4 * 4096), b(4 * 4096);
  b.MarkLines(62, 4);
  b.MarkLines(255, 1);
  a.Absorb(b);
  EXPECT_EQ(MarkedRuns(a), (Runs{{62, 4}, {255, 1}}));
  EXPECT_TRUE(b.Empty());

  ChangeLog empty(4 * 4096);
  a.Absorb(empty);
  EXPECT_EQ(MarkedRuns(a), (Runs{{62, 4}, {255, 1}}));
}

TEST(ChangeLogAbsorbTest, AbsorbedLogClearsFully) {
  // Absorb must raise the summary bytes of the groups it fills, or Clear and
  // scans would skip them.
  ChangeLog a(24 * 4096), b(24 * 4096);
  b.MarkLines(17 * 64 + 1, 1);
  a.Absorb(b);
  EXPECT_FALSE(a.Empty());
  EXPECT_EQ(a.summary()[2], 1);  // pages 16..23
  a.Clear();
  EXPECT_TRUE(a.Empty());
  EXPECT_FALSE(RawBit(a, 17 * 64 + 1));
}

// The two tests below show that Absorb and Clear walk the summary and never
// sweep a clean group of pages: a bit set behind the summary's back is
// invisible to them. That is what makes their cost follow the marked groups
// rather than the area size.
TEST(ChangeLogAbsorbTest, AbsorbReadsOnlyGroupsMarkedInTheSource) {
  ChangeLog a(24 * 4096), b(24 * 4096);
  b.bits()[(3 * 64 + 7) / 8] |= 1 << 7;  // no summary byte: pages 0..7 count as clean
  b.MarkLines(9 * 64, 1);
  a.Absorb(b);
  EXPECT_FALSE(a.Test(3 * 64 + 7));
  EXPECT_TRUE(a.Test(9 * 64));
  EXPECT_EQ(a.summary()[0], 0);
  EXPECT_TRUE(RawBit(b, 3 * 64 + 7));  // left where it was
}

TEST(ChangeLogAbsorbTest, ClearTouchesOnlyGroupsMarked) {
  ChangeLog log(24 * 4096);
  log.bits()[(2 * 64 + 5) / 8] |= 1 << 5;  // no summary byte: pages 0..7 count as clean
  log.MarkLines(12 * 64 + 9, 1);
  log.Clear();
  EXPECT_TRUE(RawBit(log, 2 * 64 + 5));
  EXPECT_FALSE(RawBit(log, 12 * 64 + 9));
  EXPECT_EQ(log.summary()[1], 0);
}

TEST(ChangeLogAbsorbTest, FastPathMarksAreSeenByEveryOperation) {
  // dsm_log() marks with dsm__mark_line from dsm.h, without MarkLines.
  ChangeLog log(17 * 4096), sink(17 * 4096);
  for (size_t line : {size_t{0}, size_t{64}, size_t{65}, size_t{319}, size_t{16 * 64 + 63}}) {
    dsm__mark_line(log.bits(), log.summary(), line);
  }
  dsm__mark_line(log.bits(), log.summary(), 65);  // again: no change
  const Runs want{{0, 1}, {64, 2}, {319, 1}, {16 * 64 + 63, 1}};
  EXPECT_EQ(MarkedRuns(log), want);
  EXPECT_EQ(log.CountLines(), 5u);
  sink.Absorb(log);
  EXPECT_EQ(MarkedRuns(sink), want);
  EXPECT_TRUE(log.Empty());
  sink.Clear();
  EXPECT_TRUE(sink.Empty());
  EXPECT_EQ(sink.CountLines(), 0u);
}

TEST(ChangeLogAbsorbTest, MarkLineBitsSetsARangeAsTheFastPathWouldLineByLine) {
  std::mt19937_64 rng(0x5eed0003);
  const size_t area = 40 * 4096 + 200;
  for (int round = 0; round < 200; ++round) {
    ChangeLog ranged(area), single(area);
    const size_t first = rng() % ranged.lines();
    const size_t count = 1 + rng() % std::min<size_t>(ranged.lines() - first, 1500);
    MarkLineBits(ranged.bits(), ranged.summary(), first, count);
    for (size_t line = first; line < first + count; ++line) {
      dsm__mark_line(single.bits(), single.summary(), line);
    }
    const size_t groups = (ranged.pages() + kPagesPerSummary - 1) / kPagesPerSummary;
    ASSERT_EQ(std::memcmp(ranged.bits(), single.bits(), ranged.pages() * 8), 0)
        << first << "+" << count;
    ASSERT_EQ(std::memcmp(ranged.summary(), single.summary(), groups), 0) << first << "+" << count;
  }
}

// --- TakePages ------------------------------------------------------------------------

struct DrainedPage {
  size_t page;
  uint64_t mask;
};

std::vector<DrainedPage> DrainAll(ChangeLog& log) {
  std::vector<DrainedPage> pages;
  const ChangeLog::TakenPages taken = log.TakePages();
  EXPECT_EQ(taken.pages.size(), taken.masks.size());
  for (size_t k = 0; k < taken.pages.size(); ++k) pages.push_back({taken.pages[k], taken.masks[k]});
  return pages;
}

TEST(ChangeLogTakePagesTest, EmptyLogCallsNothing) {
  ChangeLog log(9 * 4096 + 5);
  EXPECT_TRUE(DrainAll(log).empty());
  ChangeLog zero(0);
  EXPECT_TRUE(DrainAll(zero).empty());
}

TEST(ChangeLogTakePagesTest, VisitsEachDirtyPageOnceInAscendingOrderWithItsMask) {
  ChangeLog log(40 * 4096);
  log.MarkLines(39 * 64 + 63, 1);  // the last line, marked first
  log.MarkLines(3, 1);
  log.MarkLines(9 * 64 + 62, 4);  // lines 62..63 of page 9, 0..1 of page 10
  log.MarkLines(3, 1);            // twice: still one page visit
  const std::vector<DrainedPage> pages = DrainAll(log);
  ASSERT_EQ(pages.size(), 4u);
  const size_t expected_pages[] = {0, 9, 10, 39};
  for (size_t i = 0; i < pages.size(); ++i) EXPECT_EQ(pages[i].page, expected_pages[i]);
  auto expect_only = [](const DrainedPage& p, std::vector<size_t> set) {
    for (size_t i = 0; i < kLinesPerPage; ++i) {
      const bool want = std::find(set.begin(), set.end(), i) != set.end();
      EXPECT_EQ((p.mask >> i & 1) != 0, want) << "page " << p.page << " line " << i;
    }
  };
  expect_only(pages[0], {3});
  expect_only(pages[1], {62, 63});
  expect_only(pages[2], {0, 1});
  expect_only(pages[3], {63});

  EXPECT_TRUE(log.Empty());
  EXPECT_EQ(log.CountLines(), 0u);
  ExpectRawBytesZero(log);
  EXPECT_TRUE(DrainAll(log).empty());
}

TEST(ChangeLogTakePagesTest, DrainedLogIsReusable) {
  ChangeLog log(8 * 4096);
  log.MarkLines(100, 30);
  DrainAll(log);
  log.MarkLines(7 * 64 + 5, 1);
  const std::vector<DrainedPage> pages = DrainAll(log);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages[0].page, 7u);
  EXPECT_EQ(pages[0].mask, uint64_t{1} << 5);
}

TEST(ChangeLogTakePagesTest, PartialLastPageReportsNoLinePastTheArea) {
  ChangeLog log(3 * 4096 + 100);  // 194 lines: the last page holds 2
  log.MarkBytes(0, SIZE_MAX);
  const std::vector<DrainedPage> pages = DrainAll(log);
  ASSERT_EQ(pages.size(), 4u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(pages[i].mask, ~uint64_t{0});
  EXPECT_EQ(pages[3].mask, uint64_t{0b11});
}

TEST(ChangeLogTakePagesTest, RandomMarksDrainIntoTheSameLines) {
  std::mt19937_64 rng(0x5eed0004);
  const size_t areas[] = {1, 64, 4097, 9 * 4096, 65 * 4096 + 1};
  for (size_t area : areas) {
    for (int round = 0; round < 20; ++round) {
      SCOPED_TRACE(testing::Message() << "area " << area << " round " << round);
      ChangeLog log(area);
      std::vector<bool> model(log.lines());
      const int marks = round % 2 == 0 ? 3 : 60;
      for (int m = 0; m < marks; ++m) {
        const size_t offset = rng() % (area + 100);
        const size_t len = rng() % (round % 4 == 3 ? 20000 : 300);
        log.MarkBytes(offset, len);
        ModelMarkBytes(model, area, offset, len);
      }
      LineSet drained(area);
      size_t previous_page = 0;
      bool first = true;
      for (const DrainedPage& p : DrainAll(log)) {
        EXPECT_TRUE(first || p.page > previous_page)
            << "page " << p.page << " after " << previous_page;
        first = false;
        previous_page = p.page;
        drained.AddMask(p.page, p.mask);
      }
      for (size_t i = 0; i < model.size(); ++i)
        ASSERT_EQ(drained.Test(i), model[i]) << "line " << i;
      ExpectMatchesModel(log, std::vector<bool>(log.lines()));
      ExpectRawBytesZero(log);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(ChangeLogTakePagesTest, SeesFastPathMarks) {
  // dsm_log() marks with dsm__mark_line from dsm.h, without MarkLines.
  ChangeLog log(5 * 4096);
  for (size_t line : {size_t{0}, size_t{64}, size_t{65}, size_t{319}}) {
    dsm__mark_line(log.bits(), log.summary(), line);
  }
  const std::vector<DrainedPage> pages = DrainAll(log);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(pages[0].page, 0u);
  EXPECT_EQ(pages[0].mask, 1u);
  EXPECT_EQ(pages[1].page, 1u);
  EXPECT_EQ(pages[1].mask, 0b11u);
  EXPECT_EQ(pages[2].page, 4u);
  EXPECT_EQ(pages[2].mask, uint64_t{1} << 63);
  ExpectRawBytesZero(log);
}

// TakePages walks the summary, like Absorb and Clear: its cost follows the
// marked groups of pages.
TEST(ChangeLogTakePagesTest, FollowsTheSummary) {
  ChangeLog log(24 * 4096);
  log.bits()[(2 * 64 + 5) / 8] |= 1 << 5;  // no summary byte: pages 0..7 count as clean
  log.summary()[2] = 1;                    // a summary byte without bits
  EXPECT_TRUE(DrainAll(log).empty());      // no page with an empty mask
  EXPECT_EQ(log.summary()[2], 0);
  EXPECT_TRUE(RawBit(log, 2 * 64 + 5));  // untouched
}

TEST(ChangeLogTakePagesTest, DrainsWhatAbsorbBroughtIn) {
  ChangeLog a(8 * 4096), b(8 * 4096);
  a.MarkLines(1, 1);
  b.MarkLines(5 * 64 + 1, 2);
  a.Absorb(b);
  const std::vector<DrainedPage> pages = DrainAll(a);
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_EQ(pages[1].page, 5u);
  EXPECT_EQ(pages[1].mask, 0b110u);
  EXPECT_TRUE(b.Empty());
}

// --- TakePages and ListLines, as a publish uses them ------------------------------------

// The marked lines, taken and listed as StageChanges does.
std::vector<uint32_t> ListTaken(const ChangeLog::TakenPages& taken) {
  std::vector<uint32_t> out(taken.lines + ChangeLog::kListSlack);
  out.resize(ChangeLog::ListLines(taken.pages, taken.masks, out.data()));
  return out;
}

// Both forms of the scans (AVX-512 where the CPU has it, and portable) must
// count and list the same lines.
TEST(ChangeLogListLinesTest, ListsEveryTakenLineInOrder) {
  const bool had_avx512 = UseAvx512LogScans(false);
  for (const bool avx512 : {false, true}) {
    UseAvx512LogScans(avx512);
    std::mt19937_64 rng(0x5eed0005);
    const size_t areas[] = {64, 4097, 9 * 4096, 65 * 4096 + 1};
    for (size_t area : areas) {
      for (int round = 0; round < 30; ++round) {
        SCOPED_TRACE(testing::Message() << (avx512 ? "AVX-512 if present" : "portable") << " area "
                                        << area << " round " << round);
        ChangeLog log(area);
        std::vector<bool> model(log.lines());
        // Sparse and dense rounds: pages with one line, and pages with more
        // than the four lines listed without a loop.
        const int marks = round % 3 == 0 ? 2 : round % 3 == 1 ? 40 : 400;
        for (int m = 0; m < marks; ++m) {
          const size_t line = rng() % log.lines();
          const size_t count = round % 2 == 0 ? 1 : 1 + rng() % 9;
          log.MarkLines(line, count);
          for (size_t i = line; i < line + count && i < model.size(); ++i) model[i] = true;
        }
        std::vector<uint32_t> want;
        for (size_t i = 0; i < model.size(); ++i) {
          if (model[i]) want.push_back(static_cast<uint32_t>(i));
        }
        const ChangeLog::TakenPages t = log.TakePages();
        EXPECT_EQ(t.lines, want.size());
        EXPECT_EQ(ListTaken(t), want);
        LineSet from_pages(area);
        for (size_t k = 0; k < t.pages.size(); ++k) from_pages.AddMask(t.pages[k], t.masks[k]);
        EXPECT_EQ(from_pages.CountLines(), want.size());
        ExpectRawBytesZero(log);
        if (HasFatalFailure()) break;
      }
    }
  }
  UseAvx512LogScans(had_avx512);
}

// ListLines writes past the list's end, but never more than kListSlack
// entries: pages of every line count from 1 to 64, each alone.
TEST(ChangeLogListLinesTest, WritesNoFurtherThanTheSlack) {
  const bool had_avx512 = UseAvx512LogScans(false);
  for (const bool avx512 : {false, true}) {
    UseAvx512LogScans(avx512);
    for (size_t count = 1; count <= kLinesPerPage; ++count) {
      SCOPED_TRACE(testing::Message()
                   << (avx512 ? "AVX-512 if present" : "portable") << ", " << count << " lines");
      // Every other line from 63 down, then the rest: order within the page
      // must not matter.
      uint64_t mask = 0;
      for (size_t i = 0; i < count; ++i)
        mask |= uint64_t{1} << (i < 32 ? 63 - 2 * i : 2 * (i - 32));
      const uint32_t page = 5;
      constexpr uint32_t kCanary = 0xdeadbeef;
      std::vector<uint32_t> out(count + ChangeLog::kListSlack + 8, kCanary);
      const size_t n = ChangeLog::ListLines(std::span<const uint32_t>(&page, 1),
                                            std::span<const uint64_t>(&mask, 1), out.data());
      ASSERT_EQ(n, count);
      uint64_t listed = 0;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i] / kLinesPerPage, page);
        if (i > 0) {
          EXPECT_LT(out[i - 1], out[i]);
        }
        listed |= uint64_t{1} << (out[i] % kLinesPerPage);
      }
      EXPECT_EQ(listed, mask);
      for (size_t i = count + ChangeLog::kListSlack; i < out.size(); ++i)
        EXPECT_EQ(out[i], kCanary);
    }
  }
  UseAvx512LogScans(had_avx512);
}

TEST(ChangeLogTakePagesTest, CountsTheLinesOfEveryPageItTakes) {
  ChangeLog log(16 * 4096);
  log.MarkLines(10, 100);
  const ChangeLog::TakenPages t = log.TakePages();
  EXPECT_EQ(t.lines, 100u);
  ASSERT_EQ(t.pages.size(), 2u);
  EXPECT_EQ(t.masks[0], ~uint64_t{0} << 10);
  EXPECT_EQ(t.masks[1], (uint64_t{1} << 46) - 1);
  EXPECT_TRUE(log.Empty());

  log.MarkLines(7, 1);
  const ChangeLog::TakenPages one = log.TakePages();
  EXPECT_EQ(one.lines, 1u);
  EXPECT_EQ(ListTaken(one), std::vector<uint32_t>{7});
  EXPECT_EQ(log.TakePages().lines, 0u);
}

// --- Large areas ------------------------------------------------------------------

TEST(ChangeLogLargeTest, SixtyFourMiBAreaWithAFewMarks) {
  const size_t area = size_t{64} << 20;
  ChangeLog log(area);
  const size_t last = log.lines() - 1;
  log.MarkBytes(0, 1);
  log.MarkBytes(4096 * 1000 - 1, 2);  // straddles pages 999 and 1000
  log.MarkBytes(area - 1, 1);
  EXPECT_EQ(MarkedRuns(log), (Runs{{0, 1}, {64000 - 1, 2}, {last, 1}}));
  EXPECT_EQ(log.CountLines(), 4u);

  ChangeLog other(area);
  other.MarkLines(last - 1, 1);  // joins the run at the very end
  log.Absorb(other);
  EXPECT_EQ(MarkedRuns(log), (Runs{{0, 1}, {64000 - 1, 2}, {last - 1, 2}}));

  std::vector<size_t> drained;
  for (const DrainedPage& p : DrainAll(log)) drained.push_back(p.page);
  EXPECT_EQ(drained, (std::vector<size_t>{0, 999, 1000, log.pages() - 1}));
  EXPECT_TRUE(log.Empty());
  EXPECT_TRUE(MarkedRuns(log).empty());
}

TEST(ChangeLogLargeTest, SixtyFourMiBAreaMarkedWhole) {
  const size_t area = size_t{64} << 20;
  ChangeLog log(area);
  log.MarkBytes(0, area);
  EXPECT_EQ(MarkedRuns(log), (Runs{{0, log.lines()}}));
  EXPECT_EQ(log.CountLines(), log.lines());
  log.Clear();
  EXPECT_TRUE(log.Empty());
  EXPECT_EQ(log.CountLines(), 0u);
}

}  // namespace
}  // namespace dsm
