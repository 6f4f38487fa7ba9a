#include "coherence/line_set.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace dsm {
namespace {

using Runs = std::vector<std::pair<size_t, size_t>>;     // (first line, count)
using Pages = std::vector<std::pair<size_t, uint64_t>>;  // (page, mask)

Runs CollectRuns(const LineSet& set) {
  Runs runs;
  set.ForEachRun([&](size_t first, size_t count) { runs.emplace_back(first, count); });
  return runs;
}

Pages CollectPages(const LineSet& set) {
  Pages pages;
  set.ForEachPage([&](size_t page, uint64_t mask) { pages.emplace_back(page, mask); });
  return pages;
}

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

// Checks every read-side view of `set` against a per-line model.
void ExpectMatchesModel(const LineSet& set, const std::vector<bool>& model) {
  ASSERT_EQ(set.lines(), model.size());
  size_t marked = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    ASSERT_EQ(set.Test(i), model[i]) << "line " << i;
    marked += model[i];
  }
  EXPECT_EQ(set.CountLines(), marked);
  EXPECT_EQ(set.Empty(), marked == 0);
  EXPECT_EQ(CollectRuns(set), ModelRuns(model));
  // ForEachPage: each non-empty page exactly once, with its mask.
  Pages pages = CollectPages(set);
  std::sort(pages.begin(), pages.end());
  Pages expected;
  for (size_t page = 0; page < set.pages(); ++page) {
    uint64_t mask = 0;
    for (size_t i = 0; i < kLinesPerPage && page * kLinesPerPage + i < model.size(); ++i) {
      if (model[page * kLinesPerPage + i]) mask |= uint64_t{1} << i;
    }
    EXPECT_EQ(set.mask(page), mask) << "page " << page;
    if (mask != 0) expected.emplace_back(page, mask);
  }
  EXPECT_EQ(pages, expected);
}

void ModelAddLines(std::vector<bool>& model, size_t first, size_t count) {
  for (size_t i = first; i < model.size() && i - first < count; ++i) model[i] = true;
}

// --- Geometry and adding ------------------------------------------------------------

TEST(LineSetTest, GeometryRoundsPartialLinesAndPagesUp) {
  struct Case {
    size_t area_bytes, lines, pages;
  };
  const Case cases[] = {{0, 0, 0},
                        {1, 1, 1},
                        {64, 1, 1},
                        {65, 2, 1},
                        {4096, 64, 1},
                        {4097, 65, 2},
                        {3 * 4096 + 100, 194, 4},
                        {size_t{64} << 20, size_t{1} << 20, size_t{1} << 14}};
  for (const Case& c : cases) {
    LineSet set(c.area_bytes);
    EXPECT_EQ(set.lines(), c.lines) << c.area_bytes;
    EXPECT_EQ(set.pages(), c.pages) << c.area_bytes;
    EXPECT_TRUE(set.Empty()) << c.area_bytes;
    EXPECT_EQ(set.CountLines(), 0u);
  }
}

TEST(LineSetTest, AddMaskSetsThoseLinesAndOrsIntoThePage) {
  LineSet set(4 * 4096);
  set.AddMask(1, 0b1010);
  set.AddMask(1, 0b0110);
  set.AddMask(3, uint64_t{1} << 63);
  EXPECT_EQ(set.mask(1), 0b1110u);
  EXPECT_EQ(set.mask(0), 0u);
  EXPECT_EQ(CollectRuns(set), (Runs{{65, 3}, {255, 1}}));
  EXPECT_EQ(set.CountLines(), 4u);
  EXPECT_EQ(CollectPages(set), (Pages{{1, 0b1110}, {3, uint64_t{1} << 63}}));
}

TEST(LineSetTest, AddMaskOfZeroAddsNothing) {
  LineSet set(4 * 4096);
  set.AddMask(2, 0);
  EXPECT_TRUE(set.Empty());
  EXPECT_TRUE(CollectPages(set).empty());
  EXPECT_TRUE(CollectRuns(set).empty());
}

TEST(LineSetTest, AddLinesWithinAPage) {
  LineSet set(4 * 4096);
  std::vector<bool> model(set.lines());
  set.AddLines(3, 2);
  ModelAddLines(model, 3, 2);
  set.AddLines(100, 1);
  ModelAddLines(model, 100, 1);
  ExpectMatchesModel(set, model);
  EXPECT_EQ(set.mask(0), 0b11000u);
}

TEST(LineSetTest, AddLinesAtPageEdges) {
  struct Case {
    size_t first, count;
    Pages pages;
  };
  const uint64_t all = ~uint64_t{0};
  const Case cases[] = {
      {0, 1, {{0, 1}}},
      {63, 1, {{0, uint64_t{1} << 63}}},
      {64, 1, {{1, 1}}},
      {63, 2, {{0, uint64_t{1} << 63}, {1, 1}}},
      {0, 64, {{0, all}}},
      {64, 64, {{1, all}}},
      {1, 63, {{0, all - 1}}},
      {0, 63, {{0, all >> 1}}},
      {60, 72, {{0, uint64_t{0xf} << 60}, {1, all}, {2, 0xf}}},
      {0, 256, {{0, all}, {1, all}, {2, all}, {3, all}}},
  };
  for (const Case& c : cases) {
    LineSet set(4 * 4096);
    set.AddLines(c.first, c.count);
    Pages pages = CollectPages(set);
    std::sort(pages.begin(), pages.end());
    EXPECT_EQ(pages, c.pages) << c.first << "+" << c.count;
    EXPECT_EQ(CollectRuns(set), (Runs{{c.first, c.count}})) << c.first << "+" << c.count;
  }
}

TEST(LineSetTest, AddLinesClipsAtTheEnd) {
  LineSet set(1000);  // 16 lines, the last one partial
  ASSERT_EQ(set.lines(), 16u);
  set.AddLines(14, 100);
  EXPECT_EQ(CollectRuns(set), (Runs{{14, 2}}));
  EXPECT_EQ(set.mask(0), uint64_t{0b11} << 14);  // no bit past the last line
  set.Clear();
  set.AddLines(3, SIZE_MAX);  // first + count would overflow
  EXPECT_EQ(CollectRuns(set), (Runs{{3, 13}}));
  set.Clear();
  set.AddAll();
  EXPECT_EQ(set.mask(0), 0xffffu);
  EXPECT_EQ(set.CountLines(), 16u);
}

TEST(LineSetTest, AddLinesOutOfRangeOrEmptyIsIgnored) {
  LineSet set(1000);
  set.AddLines(16, 1);
  set.AddLines(SIZE_MAX, 1);
  set.AddLines(SIZE_MAX, SIZE_MAX);
  set.AddLines(5, 0);
  ExpectMatchesModel(set, std::vector<bool>(set.lines()));
  LineSet zero(0);
  zero.AddAll();
  zero.AddLines(0, 10);
  EXPECT_TRUE(zero.Empty());
  EXPECT_TRUE(CollectRuns(zero).empty());
}

// AddRunsInOrder adds what AddLines would, run by run: single lines, runs
// within a page, runs across pages and past the end, empty runs, pages the
// set listed before and pages a run repeats; and each page is listed once.
TEST(LineSetTest, AddRunsInOrderAddsWhatAddLinesWould) {
  struct TestRun {
    uint32_t first_line;
    uint32_t line_count;
  };
  std::mt19937_64 rng(0x5eed0a11);
  const size_t areas[] = {64, 4097, 9 * 4096, 65 * 4096 + 1};
  for (size_t area : areas) {
    for (int round = 0; round < 40; ++round) {
      SCOPED_TRACE(testing::Message() << "area " << area << " round " << round);
      LineSet set(area);
      std::vector<bool> model(set.lines());
      auto add_to_model = [&](size_t first, size_t count) {
        for (size_t i = first; i < first + count && i < model.size(); ++i) model[i] = true;
      };
      // Some lines there before, the set reused after a Clear in odd rounds.
      if (round % 2 == 1) {
        set.AddLines(rng() % set.lines(), 70);
        set.Clear();
      }
      for (int k = 0; k < round % 5; ++k) {
        const size_t first = rng() % set.lines(), count = 1 + rng() % 3;
        set.AddLines(first, count);
        add_to_model(first, count);
      }
      std::vector<TestRun> runs;
      size_t line = rng() % 8;
      while (line < set.lines() + 80) {
        const size_t pick = rng() % 10;
        const size_t count = pick < 6 ? 1 : pick < 8 ? 2 + rng() % 6 : pick < 9 ? rng() % 130 : 0;
        runs.push_back({static_cast<uint32_t>(line), static_cast<uint32_t>(count)});
        add_to_model(line, count);
        line += count + 1 + rng() % (round % 3 == 0 ? 3 : 200);
      }
      set.AddRunsInOrder(runs);
      ExpectMatchesModel(set, model);
      Pages listed;
      set.ForEachPage([&](size_t page, uint64_t mask) { listed.emplace_back(page, mask); });
      std::sort(listed.begin(), listed.end());
      EXPECT_TRUE(
          std::adjacent_find(listed.begin(), listed.end(), [](const auto& a, const auto& b) {
            return a.first == b.first;
          }) == listed.end());
      if (HasFatalFailure()) return;
    }
  }
}

TEST(LineSetTest, AddAllOnAPartialLastPage) {
  LineSet set(3 * 4096 + 100);  // 194 lines
  set.AddAll();
  EXPECT_EQ(CollectRuns(set), (Runs{{0, 194}}));
  EXPECT_EQ(set.mask(3), 0b11u);
  EXPECT_EQ(set.CountLines(), 194u);
}

// --- Merge, ClearPage, Clear ----------------------------------------------------------

TEST(LineSetTest, MergeIsAUnionAndLeavesTheSourceAlone) {
  std::mt19937_64 rng(0x5eed2001);
  const size_t area = 9 * 4096 + 33;
  for (int round = 0; round < 50; ++round) {
    LineSet a(area), b(area);
    std::vector<bool> ma(a.lines()), mb(b.lines());
    for (int m = 0; m < 20; ++m) {
      const size_t la = rng() % a.lines(), lb = rng() % b.lines();
      const size_t ca = 1 + rng() % 70, cb = 1 + rng() % 70;
      a.AddLines(la, ca);
      b.AddLines(lb, cb);
      ModelAddLines(ma, la, ca);
      ModelAddLines(mb, lb, cb);
    }
    a.Merge(b);
    std::vector<bool> both(ma.size());
    for (size_t i = 0; i < both.size(); ++i) both[i] = ma[i] || mb[i];
    ExpectMatchesModel(a, both);
    ExpectMatchesModel(b, mb);
    if (HasFatalFailure()) return;
  }
}

TEST(LineSetTest, MergeOfEmptyIsANoOpAndIntoEmptyCopies) {
  LineSet a(4 * 4096), b(4 * 4096), empty(4 * 4096);
  b.AddLines(62, 4);
  b.AddLines(255, 1);
  a.Merge(b);
  EXPECT_EQ(CollectRuns(a), (Runs{{62, 4}, {255, 1}}));
  a.Merge(empty);
  EXPECT_EQ(CollectRuns(a), (Runs{{62, 4}, {255, 1}}));
}

TEST(LineSetTest, ClearPageEmptiesOnlyThatPage) {
  LineSet set(4 * 4096);
  set.AddLines(60, 10);  // pages 0 and 1
  set.AddLines(200, 1);  // page 3
  set.ClearPage(1);
  EXPECT_EQ(CollectRuns(set), (Runs{{60, 4}, {200, 1}}));
  EXPECT_EQ(set.CountLines(), 5u);
  EXPECT_FALSE(set.Test(64));
  EXPECT_EQ(CollectPages(set), (Pages{{0, uint64_t{0xf} << 60}, {3, uint64_t{1} << 8}}));
  set.ClearPage(0);
  set.ClearPage(3);
  EXPECT_TRUE(set.Empty());
  EXPECT_EQ(set.CountLines(), 0u);
  EXPECT_TRUE(CollectRuns(set).empty());
  EXPECT_TRUE(CollectPages(set).empty());
}

TEST(LineSetTest, PageClearedThenAddedAgainIsVisitedOnce) {
  LineSet set(8 * 4096);
  set.AddMask(2, 0xff);
  set.AddMask(5, 1);
  set.ClearPage(2);
  set.AddMask(2, 0x1);
  set.ClearPage(2);
  set.AddMask(2, 0x3);
  EXPECT_EQ(set.CountLines(), 3u);
  EXPECT_EQ(CollectPages(set), (Pages{{2, 0x3}, {5, 1}}));
  EXPECT_EQ(CollectRuns(set), (Runs{{128, 2}, {320, 1}}));
  LineSet other(8 * 4096);
  other.Merge(set);
  EXPECT_EQ(other.CountLines(), 3u);
}

TEST(LineSetTest, ClearEmptiesEverythingAndTheSetIsReusable) {
  LineSet set(10 * 4096 + 1);
  set.AddLines(0, 1);
  set.AddLines(63, 2);
  set.AddLines(300, 200);
  set.AddLines(set.lines() - 1, 1);
  set.ClearPage(4);
  ASSERT_FALSE(set.Empty());
  set.Clear();
  ExpectMatchesModel(set, std::vector<bool>(set.lines()));
  for (size_t page = 0; page < set.pages(); ++page) ASSERT_EQ(set.mask(page), 0u) << page;
  set.AddLines(64, 1);
  EXPECT_EQ(CollectRuns(set), (Runs{{64, 1}}));
  EXPECT_EQ(CollectPages(set), (Pages{{1, 1}}));
}

// --- Iteration ------------------------------------------------------------------------

TEST(LineSetTest, ForEachPageVisitsPagesInTheOrderFirstAdded) {
  LineSet set(8 * 4096);
  set.AddMask(6, 1);
  set.AddMask(1, 2);
  set.AddMask(6, 4);  // already listed: no second visit
  set.AddMask(3, 8);
  EXPECT_EQ(CollectPages(set), (Pages{{6, 5}, {1, 2}, {3, 8}}));
}

TEST(LineSetTest, ForEachRunIsInAddressOrderWhateverTheInsertionOrder) {
  LineSet set(16 * 4096);
  set.AddLines(10 * 64 + 5, 3);
  set.AddLines(2 * 64, 1);
  set.AddLines(15 * 64 + 63, 1);
  set.AddLines(0, 1);
  EXPECT_EQ(CollectRuns(set), (Runs{{0, 1}, {128, 1}, {645, 3}, {1023, 1}}));
  // Iterating twice gives the same answer, and adding after iterating still works.
  EXPECT_EQ(CollectRuns(set), (Runs{{0, 1}, {128, 1}, {645, 3}, {1023, 1}}));
  set.AddLines(1, 1);
  EXPECT_EQ(CollectRuns(set), (Runs{{0, 2}, {128, 1}, {645, 3}, {1023, 1}}));
}

TEST(LineSetTest, RunsAreTheSameWhetherFewOrManyPagesAreListed) {
  // ForEachRun sorts the list of pages when few are listed and scans every
  // page when many are: both must give the model's runs, also for pages
  // listed and then emptied.
  std::mt19937_64 rng(21);
  const size_t pages = 512;
  for (size_t listed : {size_t{1}, size_t{7}, size_t{31}, size_t{32}, size_t{33}, size_t{200},
                        pages}) {
    SCOPED_TRACE(testing::Message() << listed << " pages listed");
    LineSet set(pages * 4096);
    std::vector<bool> model(set.lines());
    std::vector<size_t> order(pages);
    for (size_t i = 0; i < pages; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i = 0; i < listed; ++i) {
      const size_t page = order[i];
      const uint64_t mask = i % 5 == 0 ? ~uint64_t{0} : rng() | 1;
      set.AddMask(page, mask);
      for (size_t b = 0; b < 64; ++b) model[page * 64 + b] = (mask >> b) & 1;
    }
    if (listed > 2) {  // one listed page emptied again
      set.ClearPage(order[1]);
      for (size_t b = 0; b < 64; ++b) model[order[1] * 64 + b] = false;
    }
    EXPECT_EQ(CollectRuns(set), ModelRuns(model));
  }
}

TEST(LineSetTest, RunsJoinAcrossPageBoundariesEvenWhenPagesWereAddedOutOfOrder) {
  LineSet set(8 * 4096);
  set.AddMask(3, 1);                    // line 192
  set.AddMask(2, ~uint64_t{0});         // lines 128..191
  set.AddMask(1, uint64_t{0x3} << 62);  // lines 126, 127
  set.AddMask(5, uint64_t{1} << 63);    // line 383: page 4 is empty, so its own run
  set.AddMask(6, 1);                    // line 384: joins 383
  EXPECT_EQ(CollectRuns(set), (Runs{{126, 67}, {383, 2}}));
}

TEST(LineSetTest, RunEndingAtAPageEndIsNotJoinedToANonAdjacentLineOfTheNextPage) {
  LineSet set(4 * 4096);
  set.AddLines(65, 1);  // next page, but not its first line
  set.AddLines(60, 4);  // ends at line 63
  EXPECT_EQ(CollectRuns(set), (Runs{{60, 4}, {65, 1}}));
}

TEST(LineSetTest, FullPagesFormOneRun) {
  LineSet set(20 * 4096);
  for (size_t page : {size_t{7}, size_t{5}, size_t{6}, size_t{4}}) set.AddMask(page, ~uint64_t{0});
  EXPECT_EQ(CollectRuns(set), (Runs{{256, 256}}));
  set.AddAll();
  EXPECT_EQ(CollectRuns(set), (Runs{{0, set.lines()}}));
}

TEST(LineSetTest, AlternatingLinesAreSeparateRuns) {
  LineSet set(3 * 4096 + 100);
  std::vector<bool> model(set.lines());
  for (size_t i = 1; i < set.lines(); i += 2) {
    set.AddLines(i, 1);
    model[i] = true;
  }
  EXPECT_EQ(CollectRuns(set).size(), set.lines() / 2);
  ExpectMatchesModel(set, model);
}

TEST(LineSetTest, RandomOperationsMatchAPerLineModel) {
  std::mt19937_64 rng(0x5eed2002);
  const size_t areas[] = {1, 64, 65, 4096, 4097, 3 * 4096 + 100, 65 * 4096 + 1};
  for (size_t area : areas) {
    LineSet set(area), other(area);
    std::vector<bool> model(set.lines()), other_model(other.lines());
    for (int op = 0; op < 400; ++op) {
      const int kind = static_cast<int>(rng() % 16);
      if (kind < 7) {
        const size_t first = rng() % (set.lines() + 2);
        const size_t count = rng() % (kind == 0 ? 3 * kLinesPerPage : 40);
        set.AddLines(first, count);
        ModelAddLines(model, first, count);
      } else if (kind < 10) {
        const size_t page = rng() % set.pages();
        uint64_t mask = rng() & rng();
        if (page == set.pages() - 1 && set.lines() % kLinesPerPage != 0) {
          mask &= (uint64_t{1} << (set.lines() % kLinesPerPage)) - 1;  // stay inside the area
        }
        set.AddMask(page, mask);
        for (size_t i = 0; i < kLinesPerPage; ++i) {
          if (mask >> i & 1) model[page * kLinesPerPage + i] = true;
        }
      } else if (kind < 12) {
        const size_t page = rng() % set.pages();
        set.ClearPage(page);
        for (size_t i = page * kLinesPerPage; i < model.size() && i < (page + 1) * kLinesPerPage;
             ++i) {
          model[i] = false;
        }
      } else if (kind < 14) {
        const size_t first = rng() % other.lines();
        const size_t count = 1 + rng() % 100;
        other.AddLines(first, count);
        ModelAddLines(other_model, first, count);
      } else if (kind == 14) {
        set.Merge(other);
        for (size_t i = 0; i < model.size(); ++i) model[i] = model[i] || other_model[i];
      } else if (rng() % 4 == 0) {
        set.Clear();
        model.assign(model.size(), false);
      }
      if (op % 20 == 0 || op == 399) {
        SCOPED_TRACE(testing::Message() << "area " << area << " op " << op);
        ExpectMatchesModel(set, model);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// --- CopyPageLines ---------------------------------------------------------------------

constexpr uint8_t kCanary = 0xa5;

// An area of `pages` pages plus a canary page on each side; copies go between
// the areas, so every byte outside the mask must keep its canary.
struct CopyFixture {
  explicit CopyFixture(size_t pages)
      : src((pages + 2) * kPageBytes), dst((pages + 2) * kPageBytes, kCanary) {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  const uint8_t* src_area() const { return src.data() + kPageBytes; }
  uint8_t* dst_area() { return dst.data() + kPageBytes; }

  // Every byte of dst equals src inside the lines of `mask` in `page`, the canary elsewhere.
  void Expect(size_t page, uint64_t mask) const {
    for (size_t i = 0; i < dst.size(); ++i) {
      const bool inside = i >= kPageBytes && i < dst.size() - kPageBytes;
      const size_t offset = i - kPageBytes;
      const bool copied =
          inside && offset / kPageBytes == page && (mask >> (offset % kPageBytes / kLineBytes) & 1);
      ASSERT_EQ(dst[i], copied ? src[i] : kCanary) << "byte " << i << " mask " << std::hex << mask;
    }
  }
  std::vector<uint8_t> src, dst;
};

TEST(CopyPageLinesTest, SingleLines) {
  for (size_t line = 0; line < kLinesPerPage; ++line) {
    CopyFixture f(3);
    EXPECT_EQ(CopyPageLines(1, uint64_t{1} << line, f.src_area(), f.dst_area()), kLineBytes);
    f.Expect(1, uint64_t{1} << line);
    if (HasFatalFailure()) return;
  }
}

TEST(CopyPageLinesTest, Runs) {
  const uint64_t masks[] = {0x3,
                            0xf0,
                            uint64_t{0x7} << 61,
                            0x00ff00ff00ff00ffu,
                            0x8000000000000001u,
                            ~uint64_t{0} >> 1,
                            ~uint64_t{0} << 1,
                            0x5555555555555555u,
                            0x0ffffffffffffff0u};
  for (uint64_t mask : masks) {
    for (size_t page : {size_t{0}, size_t{2}}) {
      CopyFixture f(3);
      EXPECT_EQ(CopyPageLines(page, mask, f.src_area(), f.dst_area()),
                static_cast<size_t>(__builtin_popcountll(mask)) * kLineBytes);
      f.Expect(page, mask);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CopyPageLinesTest, FullPage) {
  CopyFixture f(3);
  EXPECT_EQ(CopyPageLines(2, ~uint64_t{0}, f.src_area(), f.dst_area()), kPageBytes);
  f.Expect(2, ~uint64_t{0});
}

TEST(CopyPageLinesTest, EmptyMaskCopiesNothing) {
  CopyFixture f(2);
  EXPECT_EQ(CopyPageLines(1, 0, f.src_area(), f.dst_area()), 0u);
  f.Expect(1, 0);
}

TEST(CopyPageLinesTest, RandomMasks) {
  std::mt19937_64 rng(0x5eed2004);
  for (int round = 0; round < 200; ++round) {
    const uint64_t mask = round % 2 ? rng() : rng() & rng() & rng();
    CopyFixture f(2);
    EXPECT_EQ(CopyPageLines(1, mask, f.src_area(), f.dst_area()),
              static_cast<size_t>(__builtin_popcountll(mask)) * kLineBytes);
    f.Expect(1, mask);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace dsm
