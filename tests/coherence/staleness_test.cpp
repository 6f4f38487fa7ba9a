#include "coherence/staleness.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace dsm {
namespace {

constexpr uint64_t kMs = 1000 * 1000;

// A live writer, a reader on the latest version, and timestamps far enough apart
// that using the wrong one of confirmed_ns / superseded_ns changes the answer.
StalenessInput OnLatest() {
  return {.now_ns = 1000 * kMs,
          .seen_version = 7,
          .latest_version = 7,
          .confirmed_ns = 990 * kMs,
          .superseded_ns = 500 * kMs,
          .bound_ns = 100 * kMs,
          .writer_alive = true};
}

StalenessInput Behind() {
  StalenessInput in = OnLatest();
  in.seen_version = 6;
  return in;
}

TEST(StalenessTest, OnLatestLagsSinceTheWritersLastConfirmation) {
  const Staleness s = ComputeStaleness(OnLatest());
  EXPECT_EQ(s.staleness_ns, 10 * kMs);
  EXPECT_FALSE(s.stale);
}

TEST(StalenessTest, BehindLagsSinceItsVersionWasSuperseded) {
  const Staleness s = ComputeStaleness(Behind());
  EXPECT_EQ(s.staleness_ns, 500 * kMs);
  EXPECT_TRUE(s.stale);
}

TEST(StalenessTest, BehindByOneOrByManyVersionsIsTheSame) {
  StalenessInput in = Behind();
  in.seen_version = 0;
  EXPECT_EQ(ComputeStaleness(in).staleness_ns, 500 * kMs);
}

TEST(StalenessTest, BehindButRecentlySupersededIsFresh) {
  StalenessInput in = Behind();
  in.superseded_ns = 995 * kMs;
  in.confirmed_ns = 0;  // an old confirmation must not matter to a reader behind
  const Staleness s = ComputeStaleness(in);
  EXPECT_EQ(s.staleness_ns, 5 * kMs);
  EXPECT_FALSE(s.stale);
}

TEST(StalenessTest, OnLatestWithAnOldConfirmationIsStale) {
  StalenessInput in = OnLatest();
  in.confirmed_ns = 100 * kMs;
  in.superseded_ns = 999 * kMs;  // must not matter to a reader on latest
  const Staleness s = ComputeStaleness(in);
  EXPECT_EQ(s.staleness_ns, 900 * kMs);
  EXPECT_TRUE(s.stale);
}

TEST(StalenessTest, StaleOnlyStrictlyPastTheBound) {
  StalenessInput in = OnLatest();
  in.confirmed_ns = in.now_ns - in.bound_ns;
  EXPECT_FALSE(ComputeStaleness(in).stale);
  in.confirmed_ns -= 1;
  EXPECT_TRUE(ComputeStaleness(in).stale);
}

TEST(StalenessTest, ZeroBoundToleratesOnlyZeroLag) {
  StalenessInput in = OnLatest();
  in.bound_ns = 0;
  in.confirmed_ns = in.now_ns;
  EXPECT_FALSE(ComputeStaleness(in).stale);
  in.confirmed_ns = in.now_ns - 1;
  EXPECT_TRUE(ComputeStaleness(in).stale);
}

TEST(StalenessTest, WriterGoneIsAlwaysStale) {
  for (StalenessInput in : {OnLatest(), Behind()}) {
    in.writer_alive = false;
    in.confirmed_ns = in.superseded_ns = in.now_ns;  // zero lag
    in.bound_ns = UINT64_MAX;
    const Staleness s = ComputeStaleness(in);
    EXPECT_EQ(s.staleness_ns, 0u);
    EXPECT_TRUE(s.stale);
  }
}

TEST(StalenessTest, WriterGoneStillReportsTheLag) {
  StalenessInput in = OnLatest();
  in.writer_alive = false;
  EXPECT_EQ(ComputeStaleness(in).staleness_ns, 10 * kMs);
}

TEST(StalenessTest, NowBeforeSinceGivesZeroNotAWrappedLag) {
  // Timestamps from different threads can arrive slightly out of order.
  StalenessInput in = OnLatest();
  in.confirmed_ns = in.now_ns + 5;
  Staleness s = ComputeStaleness(in);
  EXPECT_EQ(s.staleness_ns, 0u);
  EXPECT_FALSE(s.stale);

  in = Behind();
  in.superseded_ns = in.now_ns + 5;
  s = ComputeStaleness(in);
  EXPECT_EQ(s.staleness_ns, 0u);
  EXPECT_FALSE(s.stale);
}

TEST(StalenessTest, NowEqualToSinceGivesZero) {
  StalenessInput in = OnLatest();
  in.confirmed_ns = in.now_ns;
  EXPECT_EQ(ComputeStaleness(in).staleness_ns, 0u);
}

TEST(StalenessTest, FullRangeOfTimestamps) {
  StalenessInput in = OnLatest();
  in.now_ns = UINT64_MAX;
  in.confirmed_ns = 0;
  in.bound_ns = UINT64_MAX;
  const Staleness s = ComputeStaleness(in);
  EXPECT_EQ(s.staleness_ns, UINT64_MAX);
  EXPECT_FALSE(s.stale);
}

}  // namespace
}  // namespace dsm
