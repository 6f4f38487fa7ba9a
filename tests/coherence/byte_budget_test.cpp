#include "coherence/byte_budget.h"

#include <gtest/gtest.h>

#include <random>

namespace dsm {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(ByteBudgetTest, StartsFullAndAccruesAtTheRateUpToTheBurst) {
  ByteBudget b(1'000'000, 10'000, 0);  // 1 MB/s: 1,000 bytes per ms
  EXPECT_EQ(b.available(), 10'000u);
  b.Spend(10'000);
  EXPECT_EQ(b.available(), 0u);
  b.Refill(3 * kMs);
  EXPECT_EQ(b.available(), 3'000u);
  b.Refill(1000 * kMs);
  EXPECT_EQ(b.available(), 10'000u) << "capped at the burst";
}

TEST(ByteBudgetTest, FractionsOfAByteCarryOver) {
  ByteBudget b(3, 100, 0);  // 3 bytes a second
  b.Spend(100);
  for (uint64_t ms = 1; ms <= 1000; ++ms) b.Refill(ms * kMs);
  EXPECT_EQ(b.available(), 3u);
}

TEST(ByteBudgetTest, DebtIsPaidFromWhatAccruesNext) {
  ByteBudget b(1'000'000, 5'000, 0);
  b.Spend(12'000);  // due lines went beyond the budget
  EXPECT_EQ(b.available(), 0u);
  b.Refill(6 * kMs);
  EXPECT_EQ(b.available(), 0u) << "7,000 owed, 6,000 accrued";
  b.Refill(9 * kMs);
  EXPECT_EQ(b.available(), 2'000u);
}

TEST(ByteBudgetTest, SpendingWhatIsAvailableStaysWithinRateTimesTimePlusBurst) {
  constexpr uint64_t kRate = 5'000'000, kBurst = 100'000;  // below the demand
  ByteBudget b(kRate, kBurst, 0);
  std::mt19937_64 rng(9);
  uint64_t now = 0, spent = 0;
  for (int i = 0; i < 100'000; ++i) {
    now += rng() % (2 * kMs);
    b.Refill(now);
    const uint64_t want = rng() % 20'000;
    const uint64_t take = std::min(want, b.available());
    b.Spend(take);
    spent += take;
    ASSERT_LE(spent, kRate * now / 1'000'000'000 + kBurst) << "at " << now << " ns";
  }
  EXPECT_GT(spent, kRate * now / 1'000'000'000 * 9 / 10) << "what accrued could be spent";
}

TEST(ByteBudgetTest, TimeGoingBackwardsAddsNothing) {
  ByteBudget b(1'000'000, 10'000, 5 * kMs);
  b.Spend(10'000);
  b.Refill(2 * kMs);
  EXPECT_EQ(b.available(), 0u);
  b.Refill(6 * kMs);
  EXPECT_EQ(b.available(), 1'000u);
}

}  // namespace
}  // namespace dsm
