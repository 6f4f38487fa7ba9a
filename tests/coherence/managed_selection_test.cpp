// ManagedSelection against a model of what the readers hold: the lines it
// chooses are copied into a model replica, and every check is made on that
// replica against the writer's bytes. Priority order, the budget, the lag
// bound over long seeded runs, convergence after the last write.
#include "coherence/managed_selection.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

namespace dsm {
namespace {

constexpr size_t kFloatsPerLine = kLineBytes / sizeof(float);

// The writer's area and what readers have, as the transfers of the lines
// chosen would leave them.
class ManagedRun {
 public:
  ManagedRun(size_t lines, ManagedParams params)
      : lines_(lines),
        selection_(lines * kLineBytes, params),
        writer_(lines * kFloatsPerLine, 0.0f),
        replica_(lines * kFloatsPerLine, 0.0f),
        changed_(lines * kLineBytes),
        send_(lines * kLineBytes),
        lag_start_(lines, 0) {}

  void Write(size_t line, size_t element, float value) {
    writer_[line * kFloatsPerLine + element] = value;
    changed_.AddLines(line, 1);
  }
  float at(size_t line, size_t element) const { return writer_[line * kFloatsPerLine + element]; }

  // Selects for `version` and applies the chosen lines to the replica.
  ManagedChoice Publish(uint64_t version, size_t budget_bytes) {
    const ManagedChoice c =
        selection_.Select(version, changed_, bytes(writer_), budget_bytes, &send_);
    changed_.Clear();
    send_.ForEachRun([&](size_t first, size_t count) {
      std::memcpy(&replica_[first * kFloatsPerLine], &writer_[first * kFloatsPerLine],
                  count * kLineBytes);
    });
    // Lag as the replica shows it: since when each line differs from the writer.
    for (size_t line = 0; line < lines_; ++line) {
      if (SameLine(line)) {
        lag_start_[line] = 0;
      } else if (lag_start_[line] == 0) {
        lag_start_[line] = version;
      }
    }
    return c;
  }
  bool SameLine(size_t line) const {
    return std::memcmp(&writer_[line * kFloatsPerLine], &replica_[line * kFloatsPerLine],
                       kLineBytes) == 0;
  }
  // The most versions any replica line lags at `version`.
  uint64_t MaxLag(uint64_t version) const {
    uint64_t most = 0;
    for (uint64_t start : lag_start_) {
      if (start != 0) most = std::max(most, version - start + 1);
    }
    return most;
  }
  bool ReplicaEqualsWriter() const {
    return XXH3_64bits(writer_.data(), writer_.size() * sizeof(float)) ==
               XXH3_64bits(replica_.data(), replica_.size() * sizeof(float)) &&
           std::memcmp(writer_.data(), replica_.data(), writer_.size() * sizeof(float)) == 0;
  }
  const LineSet& sent_lines() const { return send_; }
  const ManagedSelection& selection() const { return selection_; }
  const std::vector<float>& replica() const { return replica_; }

 private:
  static const uint8_t* bytes(const std::vector<float>& v) {
    return reinterpret_cast<const uint8_t*>(v.data());
  }

  size_t lines_;
  ManagedSelection selection_;
  std::vector<float> writer_;
  std::vector<float> replica_;
  LineSet changed_;
  LineSet send_;
  std::vector<uint64_t> lag_start_;  // version since which a line differs; 0: equal
};

std::vector<size_t> Lines(const LineSet& set) {
  std::vector<size_t> out;
  set.ForEachRun([&](size_t first, size_t count) {
    for (size_t i = 0; i < count; ++i) out.push_back(first + i);
  });
  return out;
}

TEST(ManagedSelectionTest, LargestRelativeChangesGoFirst) {
  ManagedRun run(64, {.max_line_age = 100});
  for (size_t line = 0; line < 64; ++line) run.Write(line, 0, 1.0f);
  run.Publish(1, 64 * kLineBytes);  // readers have 1.0 everywhere
  // Line i moves by a relative (i * 37 % 64 + 1) / 100: distinct, shuffled.
  for (size_t line = 0; line < 64; ++line) {
    run.Write(line, 0, 1.0f + static_cast<float>((line * 37 % 64) + 1) / 100.0f);
  }
  const ManagedChoice c = run.Publish(2, 5 * kLineBytes);
  EXPECT_EQ(c.lines, 5u);
  EXPECT_EQ(c.due_lines, 0u);
  EXPECT_EQ(c.residual, 59u);
  // The five largest moves: (line * 37 % 64) in 59..63.
  std::vector<size_t> want;
  for (size_t line = 0; line < 64; ++line) {
    if (line * 37 % 64 >= 59) want.push_back(line);
  }
  EXPECT_EQ(Lines(run.sent_lines()), want);
}

TEST(ManagedSelectionTest, ChangeFromZeroNanAndInfinityOutrankAnyFiniteRelativeChange) {
  ManagedRun run(8, {.max_line_age = 100});
  for (size_t line = 0; line < 8; ++line) run.Write(line, 0, 1.0f);
  run.Write(7, 1, 0.0f);
  run.Publish(1, 8 * kLineBytes);
  run.Write(0, 0, 1000.0f);  // relative 999
  run.Write(1, 0, std::numeric_limits<float>::quiet_NaN());
  run.Write(2, 0, std::numeric_limits<float>::infinity());
  run.Write(7, 1, 1e-3f);  // from zero
  run.Publish(2, 3 * kLineBytes);
  EXPECT_EQ(Lines(run.sent_lines()), (std::vector<size_t>{1, 2, 7}));
}

TEST(ManagedSelectionTest, AnyChangedBitIsAChangeAndAnUnchangedLineIsNot) {
  ManagedRun run(4, {.max_line_age = 100});
  run.Write(0, 0, 0.0f);   // logged, bytes as readers have them
  run.Write(1, 0, -0.0f);  // another sign of zero: different bytes
  run.Write(2, 0, std::numeric_limits<float>::denorm_min());
  const ManagedChoice c = run.Publish(1, 0);
  EXPECT_EQ(c.lines, 0u);
  EXPECT_EQ(c.residual, 2u) << "lines 1 and 2 wait; line 0 did not change";
  EXPECT_EQ(run.selection().priority(0), 0.0f);
  EXPECT_GT(run.selection().priority(1), 0.0f);
  EXPECT_GT(run.selection().priority(2), 0.0f);
}

// A reader may hold newer bytes of a waiting line than sent() (a whole-area
// transfer to it, or a resend framed from a newer version): the line must
// reach it again even if the writer puts back the bytes sent() holds.
TEST(ManagedSelectionTest, AWaitingLineWrittenBackToWhatWasSentStillGoesWithinItsAge) {
  ManagedRun run(4, {.max_line_age = 3});
  run.Write(2, 5, 4.0f);
  EXPECT_EQ(run.Publish(1, 0).residual, 1u);
  run.Write(2, 5, 0.0f);  // back to what sent() holds
  ManagedChoice c = run.Publish(2, 0);
  EXPECT_EQ(c.residual, 1u) << "it waits until sent";
  EXPECT_EQ(c.lines, 0u);
  EXPECT_EQ(run.selection().priority(2), 0.0f) << "ranked last: sent() has its bytes";
  EXPECT_EQ(run.selection().OldestLag(2), 2u) << "lagging since version 1";
  EXPECT_EQ(run.Publish(3, 0).lines, 0u);
  c = run.Publish(4, 0);
  EXPECT_EQ(c.due_lines, 1u) << "due at 1 + max_line_age";
  EXPECT_EQ(c.residual, 0u);
  for (uint64_t v = 5; v < 10; ++v) EXPECT_EQ(run.Publish(v, 0).lines, 0u) << "nothing waits";
  EXPECT_TRUE(run.ReplicaEqualsWriter());
}

TEST(ManagedSelectionTest, MaxLineAgeZeroSendsEveryChangeWithItsVersion) {
  ManagedRun run(200, {.max_line_age = 0});
  std::mt19937_64 rng(3);
  for (uint64_t v = 1; v <= 50; ++v) {
    for (int i = 0; i < 20; ++i) run.Write(rng() % 200, rng() % 16, static_cast<float>(rng() % 7));
    run.Publish(v, 0);  // no budget at all: everything is due
    ASSERT_TRUE(run.ReplicaEqualsWriter()) << "version " << v;
    ASSERT_EQ(run.selection().residual_lines(), 0u);
  }
}

TEST(ManagedSelectionTest, LinesDueByTheirLagGoBeyondTheBudgetAndAreCounted) {
  ManagedRun run(10, {.max_line_age = 2});
  for (size_t line = 0; line < 10; ++line) run.Write(line, 0, 1.0f);
  EXPECT_EQ(run.Publish(1, 0).lines, 0u);
  EXPECT_EQ(run.Publish(2, 0).lines, 0u);
  EXPECT_EQ(run.selection().OldestLag(2), 2u);
  const ManagedChoice c = run.Publish(3, 4 * kLineBytes);  // would lag 3: all ten go
  EXPECT_EQ(c.lines, 10u);
  EXPECT_EQ(c.due_lines, 10u);
  EXPECT_EQ(c.over_budget, 6 * kLineBytes);
  EXPECT_TRUE(run.ReplicaEqualsWriter());
}

// A seeded workload like a training step's: each version writes a few hot
// lines (the same parameters move every step) and a random scatter of others,
// by varying relative amounts.
void WriteStep(ManagedRun& run, size_t lines, std::mt19937_64& rng, size_t writes) {
  std::uniform_int_distribution<size_t> any(0, lines - 1);
  std::normal_distribution<float> step(0.0f, 0.05f);
  for (size_t i = 0; i < writes; ++i) {
    const size_t line = i % 4 == 0 ? any(rng) % 16 : any(rng);  // a quarter to 16 hot lines
    const size_t element = rng() % kFloatsPerLine;
    const float old = run.at(line, element);
    run.Write(line, element, old == 0.0f ? 1.0f : old * (1.0f + step(rng)));
  }
}

TEST(ManagedSelectionTest, NoLineEverLagsMoreThanMaxLineAgeOverAThousandVersions) {
  for (const uint32_t max_age : {1u, 4u, 16u}) {
    SCOPED_TRACE(testing::Message() << "max_line_age " << max_age);
    constexpr size_t kLines = 2048;
    ManagedRun run(kLines, {.max_line_age = max_age});
    std::mt19937_64 rng(max_age);
    uint64_t over_budget_versions = 0;
    for (uint64_t v = 1; v <= 1200; ++v) {
      WriteStep(run, kLines, rng, 200);
      // A budget of 40 lines against ~200 changed: most must wait.
      const ManagedChoice c = run.Publish(v, 40 * kLineBytes);
      ASSERT_LE(run.MaxLag(v), max_age) << "version " << v;
      ASSERT_EQ(run.selection().OldestLag(v), run.MaxLag(v)) << "version " << v;
      ASSERT_EQ(c.residual, run.selection().residual_lines());
      if (c.over_budget > 0) ++over_budget_versions;
      ASSERT_LE(c.lines * kLineBytes, std::max<size_t>(40 * kLineBytes, c.due_lines * kLineBytes))
          << "only lines due by their lag go beyond the budget";
    }
    if (max_age == 1) {
      EXPECT_GT(over_budget_versions, 0u) << "the bound had to win sometimes";
    }
  }
}

TEST(ManagedSelectionTest, BudgetHoldsExactlyWhileItCoversTheChangeRate) {
  constexpr size_t kLines = 4096;
  constexpr size_t kBudget = 64 * kLineBytes;
  ManagedRun run(kLines, {.max_line_age = 32});
  std::mt19937_64 rng(11);
  size_t sent = 0;
  std::uniform_int_distribution<size_t> writes(20, 110);
  for (uint64_t v = 1; v <= 1000; ++v) {
    // Bursts above the budget, less than it on average: waiting lines catch up.
    WriteStep(run, kLines, rng, writes(rng));
    const ManagedChoice c = run.Publish(v, kBudget);
    ASSERT_LE(c.lines * kLineBytes, kBudget) << "version " << v;
    ASSERT_EQ(c.over_budget, 0u) << "version " << v;
    ASSERT_LE(run.MaxLag(v), 32u);
    sent += c.lines;
  }
  EXPECT_GT(sent, 0u);
}

TEST(ManagedSelectionTest, ConvergesToTheWritersBytesWithinTheBudgetsTimeAfterTheLastWrite) {
  constexpr size_t kLines = 4096;
  constexpr size_t kBudget = 50 * kLineBytes;
  ManagedRun run(kLines, {.max_line_age = 1000});  // the bound never forces anything here
  std::mt19937_64 rng(5);
  uint64_t v = 1;
  for (; v <= 300; ++v) {
    WriteStep(run, kLines, rng, 150);
    run.Publish(v, kBudget);
  }
  --v;  // the last version; top-ups keep its number
  const size_t residual_bytes = run.selection().residual_bytes();
  ASSERT_GT(residual_bytes, 10 * kBudget) << "the test needs a residual worth many top-ups";
  const size_t rounds_allowed = (residual_bytes + kBudget - 1) / kBudget;
  size_t rounds = 0;
  while (run.selection().residual_lines() > 0 && rounds <= rounds_allowed) {
    const ManagedChoice c = run.Publish(v, kBudget);
    ASSERT_LE(c.lines * kLineBytes, kBudget);
    ASSERT_EQ(c.due_lines, 0u);
    ++rounds;
  }
  EXPECT_EQ(rounds, rounds_allowed);
  EXPECT_TRUE(run.ReplicaEqualsWriter());
  EXPECT_EQ(run.selection().OldestLag(v), 0u);
}

TEST(ManagedSelectionTest, ResetMeansReadersHoldTheGivenBytes) {
  std::vector<float> area(16 * kFloatsPerLine, 0.0f);
  area[3 * kFloatsPerLine] = 2.0f;
  ManagedSelection s(16 * kLineBytes, {.max_line_age = 8});
  LineSet changed(16 * kLineBytes), send(16 * kLineBytes);
  changed.AddLines(3, 1);
  s.Select(1, changed, reinterpret_cast<const uint8_t*>(area.data()), 0, &send);
  ASSERT_EQ(s.residual_lines(), 1u);
  s.Reset(reinterpret_cast<const uint8_t*>(area.data()));
  EXPECT_EQ(s.residual_lines(), 0u);
  EXPECT_EQ(std::memcmp(s.sent(), area.data(), 16 * kLineBytes), 0);
  EXPECT_EQ(s.Select(2, changed, reinterpret_cast<const uint8_t*>(area.data()), 0, &send).residual,
            0u)
      << "a line equal to what readers have does not wait";
}

// The same four moves, ranked both ways, with a budget of two lines.
std::vector<size_t> TwoLinesSentOfFourMoves(ManagedRank rank) {
  ManagedRun run(4, {.max_line_age = 100, .rank = rank});
  const float before[] = {0.001f, 1.0f, 100.0f, 0.1f};
  const float after[] = {0.101f, 1.5f, 102.0f, 0.2f};
  for (size_t line = 0; line < 4; ++line) run.Write(line, 0, before[line]);
  run.Publish(1, 4 * kLineBytes);
  for (size_t line = 0; line < 4; ++line) run.Write(line, 0, after[line]);
  run.Publish(2, 2 * kLineBytes);
  return Lines(run.sent_lines());
}

TEST(ManagedSelectionTest, AbsoluteRankSendsTheLargestChangesWhateverTheValue) {
  // Relative moves 100, 0.5, 0.02, 1; absolute 0.1, 0.5, 2, 0.1.
  EXPECT_EQ(TwoLinesSentOfFourMoves(ManagedRank::kAbsolute), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(TwoLinesSentOfFourMoves(ManagedRank::kRelative), (std::vector<size_t>{0, 3}));
}

// The priority of whole lines (computed four floats at a time) against a
// plain scalar statement of it, on random bit patterns: NaNs, infinities,
// subnormals, both zeros, tiny and huge values, and unchanged elements.
// Both ranks.
class WholeLinePriority : public ::testing::TestWithParam<ManagedRank> {};

TEST_P(WholeLinePriority, MatchesTheScalarDefinition) {
  const bool absolute = GetParam() == ManagedRank::kAbsolute;
  auto expected = [absolute](const float* now, const float* had) {
    float most = 0.0f;
    for (size_t i = 0; i < kFloatsPerLine; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &now[i], 4);
      std::memcpy(&b, &had[i], 4);
      if (a == b) continue;
      if (!std::isfinite(now[i]) || !std::isfinite(had[i])) {
        return std::numeric_limits<float>::infinity();
      }
      const float rel =
          absolute ? std::fabs(now[i] - had[i])
                   : std::fabs(now[i] - had[i]) /
                         std::max(std::fabs(had[i]), std::numeric_limits<float>::min());
      most = std::max({most, rel, std::numeric_limits<float>::denorm_min()});
    }
    return most;
  };
  std::mt19937_64 rng(17);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            1.0f,
                            -1.0f,
                            1e-30f};
  auto draw = [&]() {
    switch (rng() % 4) {
      case 0:
        return specials[rng() % std::size(specials)];
      case 1:
        return std::bit_cast<float>(static_cast<uint32_t>(rng()));
      default:
        return std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    }
  };
  constexpr size_t kLines = 4096;
  std::vector<float> had(kLines * kFloatsPerLine), now(kLines * kFloatsPerLine);
  for (size_t i = 0; i < had.size(); ++i) {
    had[i] = draw();
    now[i] = rng() % 3 == 0 ? had[i] : draw();
  }
  // SSE2, then AVX-512F where the machine has it.
  const bool had_avx512 = UseAvx512ManagedRanking(false);
  for (const bool avx512 : {false, true}) {
    SCOPED_TRACE(avx512 ? "AVX-512F if present" : "SSE2");
    UseAvx512ManagedRanking(avx512);
    ManagedSelection s(kLines * kLineBytes, {.max_line_age = 100, .rank = GetParam()});
    LineSet all(kLines * kLineBytes), send(kLines * kLineBytes);
    all.AddAll();
    s.Reset(reinterpret_cast<const uint8_t*>(had.data()));
    s.Select(1, all, reinterpret_cast<const uint8_t*>(now.data()), 0, &send);
    for (size_t line = 0; line < kLines; ++line) {
      const float want = expected(&now[line * kFloatsPerLine], &had[line * kFloatsPerLine]);
      ASSERT_EQ(std::bit_cast<uint32_t>(s.priority(line)), std::bit_cast<uint32_t>(want))
          << "line " << line << ": " << s.priority(line) << " vs " << want;
    }
  }
  UseAvx512ManagedRanking(had_avx512);
}

INSTANTIATE_TEST_SUITE_P(Ranks, WholeLinePriority,
                         ::testing::Values(ManagedRank::kRelative, ManagedRank::kAbsolute),
                         [](const auto& info) {
                           return info.param == ManagedRank::kAbsolute ? "Absolute" : "Relative";
                         });

// Select's page bookkeeping (which lines moved, which are due, the radix
// select, the oldest lag) has a portable and an AVX-512F form: over a seeded
// run of sparse and dense versions, budgets and write-backs, both must make
// every choice alike. (Without AVX-512F both runs are portable.)
TEST(ManagedSelectionTest, PortableAndAvx512BookkeepingChooseAlike) {
  constexpr size_t kBytes = 1000 * kLineBytes + 20;  // 16 pages, the last partial, a partial line
  struct Trace {
    std::vector<uint64_t> sent;  // per version, its chosen lines' page masks
    std::vector<size_t> counts;  // per version: lines, due, over budget, residual, oldest lag
    bool operator==(const Trace&) const = default;
  };
  auto run = [&](bool avx512) {
    UseAvx512ManagedRanking(avx512);
    std::mt19937_64 rng(77);
    std::vector<uint8_t> area((kBytes + kLineBytes - 1) / kLineBytes * kLineBytes, 0);
    std::vector<uint8_t> readers = area;
    ManagedSelection s(kBytes, {.max_line_age = 5, .rank = ManagedRank::kAbsolute});
    LineSet changed(kBytes), send(kBytes);
    Trace t;
    for (uint64_t version = 1; version <= 300; ++version) {
      const size_t writes = version % 7 == 0 ? 1001 : rng() % 200;  // some dense
      for (size_t i = 0; i < writes; ++i) {
        const size_t line = version % 7 == 0 ? i : rng() % 1001;
        const size_t at = line * kLineBytes + (rng() % 16) * sizeof(float);
        if (at + sizeof(float) > kBytes) continue;
        float x;
        if (rng() % 5 == 0) {
          std::memcpy(&x, &readers[at], sizeof x);  // back to what readers have
        } else {
          x = std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng);
        }
        std::memcpy(&area[at], &x, sizeof x);
        changed.AddLines(line, 1);
      }
      const size_t budget = (rng() % 300) * kLineBytes;
      const ManagedChoice c = s.Select(version, changed, area.data(), budget, &send);
      changed.Clear();
      send.ForEachRun([&](size_t first, size_t count) {
        std::memcpy(&readers[first * kLineBytes], &area[first * kLineBytes], count * kLineBytes);
      });
      for (size_t page = 0; page * kLinesPerPage < 1001; ++page) t.sent.push_back(send.mask(page));
      t.counts.insert(t.counts.end(), {c.lines, c.due_lines, c.over_budget, c.residual,
                                       static_cast<size_t>(s.OldestLag(version))});
    }
    return t;
  };
  const bool had_avx512 = UseAvx512ManagedRanking(false);
  const Trace portable = run(false);
  const Trace avx512 = run(true);
  UseAvx512ManagedRanking(had_avx512);
  EXPECT_TRUE(portable == avx512);
  // The run exercised what it is meant to: due lines, a budget too small, waiting lines.
  size_t due = 0, waiting = 0;
  for (size_t v = 0; v < portable.counts.size(); v += 5) {
    due += portable.counts[v + 1];
    waiting += portable.counts[v + 3];
  }
  EXPECT_GT(due, 0u);
  EXPECT_GT(waiting, 0u);
}

TEST(ManagedSelectionTest, PartialLastLineComparesOnlyTheAreasBytes) {
  constexpr size_t kBytes = 2 * kLineBytes + 6;  // one float and two bytes in the last line
  std::vector<uint8_t> area(3 * kLineBytes, 0);
  ManagedSelection s(kBytes, {.max_line_age = 8});
  LineSet changed(kBytes), send(kBytes);
  changed.AddLines(2, 1);
  area[2 * kLineBytes + 8] = 0xff;  // past the area's end: not a change
  EXPECT_EQ(s.Select(1, changed, area.data(), 0, &send).residual, 0u);
  area[2 * kLineBytes + 5] = 1;  // a byte of the area past its last whole float
  EXPECT_EQ(s.Select(2, changed, area.data(), 0, &send).residual, 1u);
  EXPECT_EQ(s.priority(2), std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace dsm
