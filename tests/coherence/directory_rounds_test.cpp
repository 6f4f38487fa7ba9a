#include "coherence/directory_rounds.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace dsm {
namespace {

using Id = DirectoryRounds::AreaId;
using Ids = std::set<Id>;

TEST(DirectoryRoundsTest, AOneFrameRoundIsCompleteAtOnce) {
  DirectoryRounds d;
  const auto got = d.OnFrame(1, 1, 0, 1, {{0, 5}, {3, 9}});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, (Ids{{0, 5}, {3, 9}}));
}

TEST(DirectoryRoundsTest, AnEmptyListingIsAListingOfNothing) {
  DirectoryRounds d;
  const auto got = d.OnFrame(1, 1, 0, 1, {});
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->empty());
}

TEST(DirectoryRoundsTest, ARoundOfSeveralFramesCompletesWithItsLastInAnyOrder) {
  DirectoryRounds d;
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
  EXPECT_FALSE(d.OnFrame(2, 1, 0, 2, {{0, 1}}));  // frame 1 of round 1 lost
  EXPECT_FALSE(d.OnFrame(2, 2, 0, 2, {{0, 1}}));
  const auto got = d.OnFrame(2, 2, 1, 2, {{4, 4}});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, (Ids{{0, 1}, {4, 4}})) << "round 1's frame does not leak into round 2";
}

TEST(DirectoryRoundsTest, LateFramesOfAnOlderRoundNeverOverrideANewerOne) {
  DirectoryRounds d;
  ASSERT_TRUE(d.OnFrame(3, 5, 0, 1, {{1, 2}}));
  EXPECT_FALSE(d.OnFrame(3, 4, 0, 1, {})) << "completed before 5: too old to say anything";
  EXPECT_FALSE(d.OnFrame(3, 5, 0, 1, {}));
  // A round begun, then a newer one: the older one's late frames are ignored.
  EXPECT_FALSE(d.OnFrame(3, 7, 0, 2, {{1, 2}}));
  EXPECT_FALSE(d.OnFrame(3, 6, 0, 1, {}));
  ASSERT_TRUE(d.OnFrame(3, 7, 1, 2, {}));
}

TEST(DirectoryRoundsTest, MalformedFramesAreIgnored) {
  DirectoryRounds d;
  EXPECT_FALSE(d.OnFrame(1, 1, 0, 0, {}));
  EXPECT_FALSE(d.OnFrame(1, 1, 3, 3, {}));
  // A round that changes its size midway starts over.
  EXPECT_FALSE(d.OnFrame(1, 2, 0, 2, {{9, 9}}));
  const auto got = d.OnFrame(1, 2, 0, 1, {{1, 1}});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, (Ids{{1, 1}}));
}

TEST(DirectoryRoundsTest, HostsAreTrackedApartAndARestartStartsOver) {
  DirectoryRounds d;
  ASSERT_TRUE(d.OnFrame(1, 10, 0, 1, {{0, 1}}));
  ASSERT_TRUE(d.OnFrame(2, 1, 0, 1, {{0, 2}})) << "another host's round numbers are its own";
  EXPECT_FALSE(d.OnFrame(1, 1, 0, 1, {}));
  d.Forget(1);
  const auto got = d.OnFrame(1, 1, 0, 1, {{5, 1}});
  ASSERT_TRUE(got.has_value()) << "a restarted host counts rounds from 1 again";
  EXPECT_EQ(*got, (Ids{{5, 1}}));
}

}  // namespace
}  // namespace dsm
