// The pacer with a fake clock in nanoseconds: burst, long-run rate, exact
// accounting of fractional costs, idle periods refill only up to the burst.
#include "net/pacer.h"

#include <gtest/gtest.h>

namespace dsm::net {
namespace {

constexpr uint64_t kNsPerSec = 1'000'000'000;

struct FakeClock {
  uint64_t now = 0;
  Pacer::Clock fn() {
    return [this] { return now; };
  }
};

// Sends `bits`-sized frames as fast as the pacer allows for `duration_ns`;
// returns frames sent.
uint64_t RunFor(Pacer& pacer, FakeClock& clock, uint64_t bits, uint64_t duration_ns) {
  const uint64_t end = clock.now + duration_ns;
  uint64_t frames = 0;
  while (true) {
    const uint64_t delay = pacer.DelayTicks(bits);
    if (clock.now + delay > end) break;
    clock.now += delay;
    const bool sent = pacer.TryConsume(bits);
    EXPECT_TRUE(sent) << "a frame conforms once its delay has passed";
    if (!sent) break;
    ++frames;
  }
  return frames;
}

TEST(PacerTest, UnpacedNeverDelays) {
  FakeClock clock;
  Pacer pacer(0, kNsPerSec, 8000, clock.fn());
  EXPECT_FALSE(pacer.enabled());
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(pacer.DelayTicks(12000), 0u);
    pacer.Consume(12000);
  }
}

TEST(PacerTest, BurstThenSpacing) {
  FakeClock clock;
  // 1 Gbit/s: a 1000-bit frame costs 1000 ns; the bucket holds 8000 bits.
  Pacer pacer(1'000'000'000, kNsPerSec, 8000, clock.fn());
  int burst = 0;
  while (pacer.TryConsume(1000)) ++burst;
  EXPECT_EQ(burst, 9);  // a full bucket plus the frame that empties it
  EXPECT_EQ(pacer.DelayTicks(1000), 1000u);
  clock.now += 999;
  EXPECT_FALSE(pacer.TryConsume(1000));
  clock.now += 1;
  EXPECT_TRUE(pacer.TryConsume(1000));
  EXPECT_FALSE(pacer.TryConsume(1000));
}

TEST(PacerTest, LongRunRateIsExact) {
  FakeClock clock;
  const uint64_t rate = 700'000'000;  // 12000-bit frames cost 17142.857... ns
  Pacer pacer(rate, kNsPerSec, 64 * 1024 * 8, clock.fn());
  const uint64_t frames = RunFor(pacer, clock, 12000, kNsPerSec);
  const uint64_t bits = frames * 12000;
  // One second at 700 Mbit/s plus the initial bucket, within one frame.
  EXPECT_NEAR(static_cast<double>(bits), static_cast<double>(rate + 64 * 1024 * 8), 12000.0);
}

TEST(PacerTest, IdleRefillsOnlyUpToTheBurst) {
  FakeClock clock;
  Pacer pacer(1'000'000'000, kNsPerSec, 8000, clock.fn());
  while (pacer.TryConsume(1000)) {
  }
  clock.now += 10 * kNsPerSec;  // a long idle period
  int burst = 0;
  while (pacer.TryConsume(1000)) ++burst;
  EXPECT_EQ(burst, 9);
}

TEST(PacerTest, TscLikeClock) {
  FakeClock clock;  // ticks of a 2.5 GHz TSC
  const uint64_t hz = 2'500'000'000;
  Pacer pacer(10'000'000'000, hz, 64 * 1024 * 8, clock.fn());
  const uint64_t frames = RunFor(pacer, clock, (9014 + 24) * 8, hz / 10);  // 0.1 s
  const double gbps = static_cast<double>(frames) * (9014 + 24) * 8 / 0.1 / 1e9;
  EXPECT_NEAR(gbps, 10.0, 0.1);
}

}  // namespace
}  // namespace dsm::net
