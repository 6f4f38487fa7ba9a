// dsmd's forecast of a writer's next staged version (PostForecast), alone
// and as the loop uses it through StageAppliers: dsmd is looking when a
// steady writer posts, and looks only briefly, and not at all for a writer
// whose pace it cannot tell.
#include "daemon/post_forecast.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "daemon/stage_applier.h"
#include "daemon/tunables.h"
#include "libdsm/contract/shm_layout.h"
#include "libdsm/contract/stage_layout.h"

namespace dsm {
namespace {

constexpr uint64_t kMs = 1'000'000;
// A writer's pace in these tests: a window may span a quarter of it.
constexpr uint64_t kPace = 2 * kMs;

// Posts at `start`, start + gap, ... (count posts); returns the last time.
uint64_t PostEvery(PostForecast& f, uint64_t start, uint64_t gap, int count) {
  uint64_t t = start;
  for (int i = 0; i < count; ++i, t += gap) f.Posted(t);
  return t - gap;
}

TEST(PostForecastTest, NoWindowUntilTheWriterHasShownItsPace) {
  PostForecast f;
  EXPECT_FALSE(f.Next());
  const uint64_t last = PostEvery(f, 10 * kMs, kPace, static_cast<int>(kPostForecastMinGaps));
  EXPECT_FALSE(f.Next()) << "one gap short of the pace";
  f.Posted(last + kPace);
  EXPECT_TRUE(f.Next());
}

TEST(PostForecastTest, ASteadyWritersWindowHoldsItsNextPostAndIsShort) {
  PostForecast f;
  const uint64_t last = PostEvery(f, 10 * kMs, kPace, 20);
  const std::optional<PostWindow> w = f.Next();
  ASSERT_TRUE(w);
  const uint64_t expected = last + kPace;
  EXPECT_LE(w->wake_ns + kPostPollWakeLeadNs, expected) << "awake before it is due";
  EXPECT_GT(w->until_ns, expected);
  EXPECT_GT(w->wake_ns, last);
  EXPECT_LE(w->until_ns - w->wake_ns, std::min(kPostPollMaxNs, kPace / kPostPollShare));
}

TEST(PostForecastTest, AJitteryWriterIsFoundLookingNineTimesInTen) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> jitter(0, 0.01 * kPace);  // 1% of its pace
  PostForecast f;
  uint64_t t = 10 * kMs;
  int windows = 0, inside = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::optional<PostWindow> w = f.Next();
    if (w) {
      ++windows;
      inside += t >= w->wake_ns && t < w->until_ns;
      EXPECT_LE(w->until_ns - w->wake_ns, std::min(kPostPollMaxNs, kPace / kPostPollShare));
    }
    f.Posted(t);
    t += static_cast<uint64_t>(static_cast<double>(kPace) + jitter(rng));
  }
  EXPECT_GE(windows, 990);
  EXPECT_GE(inside, windows * 9 / 10);
}

TEST(PostForecastTest, AWriterTooUnevenForAShortWindowGetsNone) {
  PostForecast f;
  uint64_t t = 10 * kMs;
  for (int i = 0; i < 40; ++i, t += (i % 2 ? kPace / 2 : 3 * kPace / 2)) f.Posted(t);
  EXPECT_FALSE(f.Next());
}

TEST(PostForecastTest, AnOddGapNarrowsTheWindowRatherThanEndingIt) {
  PostForecast f;
  uint64_t last = PostEvery(f, 10 * kMs, kPace, 8);
  last += kPace + kPace / 3;  // one post late by a third of the pace
  f.Posted(last);
  const std::optional<PostWindow> w = f.Next();
  ASSERT_TRUE(w) << "seven of the last eight posts were on time";
  EXPECT_LE(w->until_ns - w->wake_ns, std::min(kPostPollMaxNs, kPace / kPostPollShare));
  EXPECT_GT(w->until_ns, last + kPace + kPace / 24) << "still around the pace's mean";
  EXPECT_LT(w->wake_ns, last + kPace + kPace / 24);
}

TEST(PostForecastTest, ASlowWriterGetsNone) {
  PostForecast f;
  PostEvery(f, 10 * kMs, kPostForecastMaxGapNs + kMs, 10);
  EXPECT_FALSE(f.Next());
}

TEST(PostForecastTest, AMissedWindowEndsTheForecastUntilTheNextPost) {
  PostForecast f;
  const uint64_t last = PostEvery(f, 10 * kMs, kPace, 20);
  ASSERT_TRUE(f.Next());
  f.Missed();
  EXPECT_FALSE(f.Next());
  f.Posted(last + kPace + kPace / 40);  // a little late: the window had passed
  EXPECT_TRUE(f.Next());
}

TEST(PostForecastTest, APauseStartsThePaceOver) {
  PostForecast f;
  const uint64_t last = PostEvery(f, 10 * kMs, kPace, 20);
  f.Posted(last + 50 * kMs);  // the writer paused (evaluation, a checkpoint)
  EXPECT_FALSE(f.Next()) << "one long gap is not a pace";
  PostEvery(f, last + 50 * kMs + kPace, kPace, static_cast<int>(kPostForecastMinGaps));
  const std::optional<PostWindow> w = f.Next();
  ASSERT_TRUE(w) << "back at 1 ms, as before the pause";
  EXPECT_LE(w->until_ns - w->wake_ns, kPace / kPostPollShare);
}

// A writer that waits for its readers: each version takes a transfer of
// uneven length (half to one and a half of kPace) to reach them, then the
// writer works `work` (1% jitter) before it posts the next.
struct ClosedLoop {
  std::mt19937_64 rng{11};
  uint64_t work = 700'000;
  uint64_t t = 10 * kMs;  // the next post
  // Posts and delivers; returns the window Next() gave before that post and
  // whether the post came inside it.
  std::optional<PostWindow> Round(PostForecast& f, bool* inside) {
    std::uniform_int_distribution<uint64_t> transfer(kPace / 2, 3 * kPace / 2);
    std::normal_distribution<double> jitter(0, 0.01 * static_cast<double>(work));
    const std::optional<PostWindow> w = f.Next();
    *inside = w && t >= w->wake_ns && t < w->until_ns;
    f.Posted(t);
    const uint64_t delivered = t + transfer(rng);
    f.Delivered(delivered);
    t = delivered + static_cast<uint64_t>(static_cast<double>(work) + jitter(rng));
    return w;
  }
};

TEST(PostForecastTest, AWriterThatWaitsForItsReadersIsFoundFromTheirDelivery) {
  PostForecast f;
  ClosedLoop loop;
  int windows = 0, caught = 0;
  for (int i = 0; i < 400; ++i) {
    bool inside = false;
    const std::optional<PostWindow> w = loop.Round(f, &inside);
    if (i < 20) continue;
    if (w) {
      ++windows;
      caught += inside;
      EXPECT_LE(w->until_ns - w->wake_ns, kPostPollMaxNs);
    }
  }
  EXPECT_GE(windows, 370) << "the delay after delivery is steady though the gaps are not";
  EXPECT_GE(caught, windows * 9 / 10);
}

TEST(PostForecastTest, AWindowFromADeliveryOpensAfterIt) {
  PostForecast f;
  ClosedLoop loop;
  bool inside = false;
  for (int i = 0; i < 20; ++i) loop.Round(f, &inside);
  // Between a post and its delivery nothing tells when the next comes (the
  // gaps are too uneven).
  f.Posted(loop.t);
  EXPECT_FALSE(f.Next());
  const uint64_t delivered = loop.t + kPace;
  f.Delivered(delivered);
  const std::optional<PostWindow> w = f.Next();
  ASSERT_TRUE(w);
  EXPECT_GT(w->wake_ns, delivered);
  EXPECT_LT(w->wake_ns, delivered + loop.work);
  EXPECT_GT(w->until_ns, delivered + loop.work);
  // A later delivery (another host's ack) does not move it.
  f.Delivered(delivered + kMs / 10);
  EXPECT_EQ(f.Next()->wake_ns, w->wake_ns);
}

TEST(PostForecastTest, APostBeforeTheDeliveryStartsTheDelaysOver) {
  PostForecast f;
  ClosedLoop loop;
  bool inside = false;
  for (int i = 0; i < 20; ++i) loop.Round(f, &inside);
  // The writer stops waiting: it posts again before the last version is delivered.
  f.Posted(loop.t);
  f.Posted(loop.t + kPace / 2);
  f.Delivered(loop.t + kPace);
  EXPECT_FALSE(f.Next()) << "no delay since it started over";
}

// StageAppliers over one area with a stage, in memory of its own: a writer
// posting empty versions at a steady pace.
class PostPollTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kAreaBytes = 64 * 1024;

  PostPollTest() : segment_(std::make_unique<ControlSegment>()) {
    const StageGeometry g = StageGeometryFor(kAreaBytes, 1);
    backing_.resize(2 * kAreaBytes + g.bytes);
    AreaControl& a = segment_->areas[0];
    a.size = kAreaBytes;
    a.buffer_count = 2;
    a.buffer_offset[0] = 0;
    a.buffer_offset[1] = kAreaBytes;
    a.stage_offset = 2 * kAreaBytes;
    a.stage_bytes = g.bytes;
    a.generation = 1;
    a.state.store(static_cast<uint32_t>(AreaState::kLive));
    a.stage_state.store(static_cast<uint32_t>(StageState::kEmpty));
    for (auto& p : a.reader_pin) p.store(kNoPins);
    appliers_ = std::make_unique<StageAppliers>(segment_.get(), backing_.data());
    appliers_->Added(0);
  }

  // The writer posts version `version` (no lines) at `now`; dsmd's turn then applies it.
  void PostAndApply(uint64_t version, uint64_t now) {
    AreaControl& a = segment_->areas[0];
    a.stage_kind = static_cast<uint32_t>(StageKind::kLines);
    a.stage_version = version;
    a.stage_runs = 0;
    a.stage_lines = 0;
    a.stage_posted_ns = now;
    a.stage_state.store(static_cast<uint32_t>(StageState::kPosted));
    ASSERT_TRUE(appliers_->Turn(now));
    ASSERT_EQ(a.stage_state.load(), static_cast<uint32_t>(StageState::kEmpty));
  }

  std::unique_ptr<ControlSegment> segment_;
  std::vector<uint8_t> backing_;
  std::unique_ptr<StageAppliers> appliers_;
};

TEST_F(PostPollTest, DsmdSleepsUntilJustBeforeTheNextPostAndLooksThrough) {
  EXPECT_EQ(appliers_->PostPollSleepNs(5 * kMs), -1) << "no writer has posted yet";
  uint64_t t = 10 * kMs;
  for (uint64_t v = 1; v <= 10; ++v, t += kPace) PostAndApply(v, t);
  const uint64_t last = t - kPace;
  const int64_t sleep = appliers_->PostPollSleepNs(last + 1000);
  EXPECT_GT(sleep, 0);
  EXPECT_LE(last + 1000 + static_cast<uint64_t>(sleep) + kPostPollWakeLeadNs, last + kPace);
  EXPECT_EQ(appliers_->PostPollSleepNs(last + kPace - 1000), 0) << "looking as it is due";
  const uint64_t hits = segment_->areas[0].staged_forecast_hits.load();
  PostAndApply(11, last + kPace);
  EXPECT_EQ(segment_->areas[0].staged_forecast_hits.load(), hits + 1);
}

TEST_F(PostPollTest, AWindowThatPassesWithoutAPostEndsTheLooking) {
  uint64_t t = 10 * kMs;
  for (uint64_t v = 1; v <= 10; ++v, t += kPace) PostAndApply(v, t);
  const uint64_t last = t - kPace;
  EXPECT_EQ(appliers_->PostPollSleepNs(last + kPace), 0);
  EXPECT_EQ(appliers_->PostPollSleepNs(last + 2 * kPace), -1) << "the writer stopped: sleep";
  EXPECT_EQ(appliers_->PostPollSleepNs(last + 3 * kPace), -1);
  const uint64_t hits = segment_->areas[0].staged_forecast_hits.load();
  PostAndApply(11, last + 5 * kPace);
  EXPECT_EQ(segment_->areas[0].staged_forecast_hits.load(), hits) << "posted while dsmd slept";
}

}  // namespace
}  // namespace dsm
