// LossMemory: when the sender must still expect requests for missing frames.
#include "coherence/loss_memory.h"

#include <gtest/gtest.h>

namespace dsm {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

TEST(LossMemoryTest, NothingLostIsNeverRecent) {
  LossMemory m(10 * kSecond, 16);
  EXPECT_FALSE(m.Recent(0));
  EXPECT_FALSE(m.Recent(5 * kSecond));
  m.OnTransferSent();
  EXPECT_FALSE(m.Recent(5 * kSecond));
}

TEST(LossMemoryTest, ALossIsRecentForTheWindowThenForgotten) {
  LossMemory m(10 * kSecond, 16);
  m.OnLoss(100 * kSecond);
  EXPECT_TRUE(m.Recent(100 * kSecond));
  EXPECT_TRUE(m.Recent(110 * kSecond - 1));
  EXPECT_FALSE(m.Recent(110 * kSecond));
}

TEST(LossMemoryTest, CleanTransfersAfterALossEndItEarly) {
  // One lossy burst (a whole-area transfer) followed by deltas that arrive whole.
  LossMemory m(10 * kSecond, 16);
  m.OnLoss(kSecond);
  for (int i = 0; i < 15; ++i) m.OnTransferSent();
  EXPECT_TRUE(m.Recent(kSecond + 1));
  m.OnTransferSent();
  EXPECT_FALSE(m.Recent(kSecond + 1));
  for (int i = 0; i < 1000; ++i) m.OnTransferSent();  // saturates, no wrap-around
  EXPECT_FALSE(m.Recent(kSecond + 2));
}

TEST(LossMemoryTest, EachNewLossStartsTheCountAgain) {
  // A network that keeps losing frames keeps the sender careful.
  LossMemory m(10 * kSecond, 16);
  for (int round = 0; round < 10; ++round) {
    m.OnLoss(kSecond + round);
    for (int i = 0; i < 10; ++i) m.OnTransferSent();
    EXPECT_TRUE(m.Recent(kSecond + round)) << round;
  }
}

}  // namespace
}  // namespace dsm
