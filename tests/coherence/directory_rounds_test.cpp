#include "coherence/directory_rounds.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace dsm {
namespace {

using Id = DirectoryRounds::AreaId;
using Ids = std::set<Id>;

// A whole one-frame round `round` of `host` listing `areas`.
std::optional<Ids> Round(DirectoryRounds& d, uint16_t host, uint64_t round,
                         const std::vector<Id>& areas) {
  return d.OnFrame(host, round, 0, 1, areas);
}

TEST(DirectoryRoundsTest, EachWholeRoundFromTheSecondGivesWhatEitherOfTheLastTwoListed) {
  DirectoryRounds d;
  EXPECT_FALSE(Round(d, 1, 1, {{0, 5}, {3, 9}})) << "one round alone decides nothing";
  EXPECT_EQ(Round(d, 1, 2, {{3, 9}, {4, 1}}), (Ids{{0, 5}, {3, 9}, {4, 1}}));
  EXPECT_EQ(Round(d, 1, 3, {{4, 1}}), (Ids{{3, 9}, {4, 1}}));
  EXPECT_EQ(Round(d, 1, 4, {{4, 1}}), (Ids{{4, 1}})) << "(3, 9): gone from two rounds in a row";
  EXPECT_EQ(Round(d, 1, 5, {}), (Ids{{4, 1}}));
  EXPECT_EQ(Round(d, 1, 6, {}), Ids{}) << "an empty listing is a listing of nothing";
}

TEST(DirectoryRoundsTest, ARoundOfSeveralFramesCompletesWithItsLastInAnyOrder) {
  DirectoryRounds d;
  EXPECT_FALSE(Round(d, 2, 6, {{0, 1}}));
  EXPECT_FALSE(d.OnFrame(2, 7, 2, 3, {{2, 1}}));
  EXPECT_FALSE(d.OnFrame(2, 7, 0, 3, {{0, 1}}));
  EXPECT_FALSE(d.OnFrame(2, 7, 0, 3, {{0, 1}})) << "a duplicate completes nothing";
  const auto got = d.OnFrame(2, 7, 1, 3, {{1, 1}});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, (Ids{{0, 1}, {1, 1}, {2, 1}}));
  EXPECT_FALSE(d.OnFrame(2, 7, 1, 3, {{1, 1}})) << "a round is reported once";
}

TEST(DirectoryRoundsTest, ALostFrameDefersTheVerdictToTheNextWholeRound) {
  DirectoryRounds d;
  EXPECT_FALSE(Round(d, 2, 1, {{7, 7}}));
  EXPECT_FALSE(d.OnFrame(2, 2, 0, 2, {{0, 1}}));  // frame 1 of round 2 lost
  EXPECT_FALSE(d.OnFrame(2, 3, 0, 2, {{0, 1}}));
  const auto got = d.OnFrame(2, 3, 1, 2, {{4, 4}});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, (Ids{{0, 1}, {4, 4}, {7, 7}})) << "round 2's frame does not leak into round 3";
}

TEST(DirectoryRoundsTest, LateFramesOfAnOlderRoundNeverOverrideANewerOne) {
  DirectoryRounds d;
  EXPECT_FALSE(Round(d, 3, 4, {{1, 2}}));
  ASSERT_TRUE(Round(d, 3, 5, {{1, 2}}));
  EXPECT_FALSE(Round(d, 3, 4, {})) << "completed before 5: too old to say anything";
  EXPECT_FALSE(Round(d, 3, 5, {}));
  // A round begun, then a newer one: the older one's late frames are ignored.
  EXPECT_FALSE(d.OnFrame(3, 7, 0, 2, {{1, 2}}));
  EXPECT_FALSE(Round(d, 3, 6, {}));
  ASSERT_TRUE(d.OnFrame(3, 7, 1, 2, {}));
}

TEST(DirectoryRoundsTest, MalformedFramesAreIgnored) {
  DirectoryRounds d;
  EXPECT_FALSE(Round(d, 1, 1, {{1, 1}}));
  EXPECT_FALSE(d.OnFrame(1, 2, 0, 0, {}));
  EXPECT_FALSE(d.OnFrame(1, 2, 3, 3, {}));
  EXPECT_FALSE(d.OnFrame(1, 2, 0, DirectoryRounds::kMaxFrames + 1, {}))
      << "no round is that long (nor is its bitmap allocated)";
  // A round that changes its size midway starts over.
  EXPECT_FALSE(d.OnFrame(1, 2, 0, 2, {{9, 9}}));
  const auto got = d.OnFrame(1, 2, 0, 1, {{1, 1}});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, (Ids{{1, 1}}));
}

TEST(DirectoryRoundsTest, HostsAreTrackedApartAndARestartStartsOver) {
  DirectoryRounds d;
  EXPECT_FALSE(Round(d, 1, 9, {{0, 1}}));
  ASSERT_TRUE(Round(d, 1, 10, {{0, 1}}));
  EXPECT_FALSE(Round(d, 2, 1, {{0, 2}}));
  ASSERT_TRUE(Round(d, 2, 2, {{0, 2}})) << "another host's round numbers are its own";
  EXPECT_FALSE(Round(d, 1, 1, {}));
  d.Forget(1);
  EXPECT_FALSE(Round(d, 1, 1, {{5, 1}})) << "a restarted host counts rounds from 1 again";
  EXPECT_EQ(Round(d, 1, 2, {{5, 1}}), (Ids{{5, 1}}));
}

// A forged whole round listing nothing retires nothing: the round before it
// still lists the areas.
TEST(DirectoryRoundsTest, OneForgedEmptyRoundRetiresNothing) {
  DirectoryRounds d;
  EXPECT_FALSE(Round(d, 1, 1, {{0, 1}}));
  EXPECT_EQ(Round(d, 1, 2, {{0, 1}}), (Ids{{0, 1}}));
  EXPECT_EQ(Round(d, 1, 3, {}), (Ids{{0, 1}}));
  EXPECT_EQ(Round(d, 1, 4, {{0, 1}}), (Ids{{0, 1}}));
}

// A forged round numbered far ahead of the host would make every real round
// look old for good. Once kOlderFramesToDoubt older frames came in a row, it
// is forgotten, and the host's real rounds count again.
TEST(DirectoryRoundsTest, ARoundNumberFarAheadIsForgottenWhenOlderRoundsKeepComing) {
  DirectoryRounds d;
  EXPECT_FALSE(Round(d, 1, 1, {{0, 1}}));
  EXPECT_EQ(Round(d, 1, 2, {{0, 1}}), (Ids{{0, 1}}));
  EXPECT_EQ(Round(d, 1, uint64_t{1} << 62, {}), (Ids{{0, 1}})) << "the forged round";
  uint64_t round = 3;
  for (uint32_t i = 1; i < DirectoryRounds::kOlderFramesToDoubt; ++i, ++round) {
    EXPECT_FALSE(Round(d, 1, round, {{0, 1}})) << "round " << round;
  }
  EXPECT_FALSE(Round(d, 1, round++, {{0, 1}})) << "believed again, a first round";
  EXPECT_EQ(Round(d, 1, round++, {{0, 1}}), (Ids{{0, 1}}));
  // Freeing works again: two real rounds without the area.
  EXPECT_EQ(Round(d, 1, round++, {}), (Ids{{0, 1}}));
  EXPECT_EQ(Round(d, 1, round++, {}), Ids{});
  // Late frames of real rounds now and then do not make a real round doubted.
  for (uint32_t i = 0; i < 3 * DirectoryRounds::kOlderFramesToDoubt; ++i, ++round) {
    EXPECT_FALSE(Round(d, 1, round - 2, {}));
    EXPECT_TRUE(Round(d, 1, round, {}));
  }
}

}  // namespace
}  // namespace dsm
