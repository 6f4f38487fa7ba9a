#include "daemon/post_forecast.h"

#include <algorithm>

#include "daemon/tunables.h"

namespace dsm {

void PostForecast::Spans::Add(uint64_t ns) {
  const uint32_t held = std::min(count_, kKept);
  const uint64_t m = held ? sum_ns_ / held : 0;
  if (held == 0 || ns > kPostForecastPaceChange * m || ns * kPostForecastPaceChange < m) Clear();
  uint64_t& slot = ns_[count_ % kKept];
  if (count_ >= kKept) sum_ns_ -= slot;
  slot = ns;
  sum_ns_ += ns;
  ++count_;
}

uint64_t PostForecast::Spans::mean() const {
  const uint32_t held = std::min(count_, kKept);
  return held ? sum_ns_ / held : 0;
}

std::optional<uint64_t> PostForecast::Spans::Half(uint64_t max_half) const {
  const uint32_t held = std::min(count_, kKept);
  const uint64_t m = mean();
  auto off = [&](uint64_t ns) { return ns > m ? ns - m : m - ns; };
  uint64_t deviation = 0;
  for (uint32_t i = 0; i < held; ++i) deviation += off(ns_[i]);
  const uint64_t half = std::min(kPostPollMinHalfNs + 2 * deviation / held, max_half);
  // Worth it only if it would have caught most of the recent posts.
  uint32_t caught = 0;
  for (uint32_t i = 0; i < held; ++i) caught += off(ns_[i]) <= half;
  if (caught * kPostForecastCaughtOf < held * kPostForecastCaught) return std::nullopt;
  return half;
}

void PostForecast::Posted(uint64_t posted_ns) {
  missed_ = false;
  if (last_ns_ == 0 || posted_ns <= last_ns_) {
    last_ns_ = std::max(last_ns_, posted_ns);
    delivered_ns_ = 0;
    return;
  }
  gaps_.Add(posted_ns - last_ns_);
  // A writer that posted before its readers had the last version does not
  // wait for them: the delays say nothing of it.
  if (delivered_ns_ != 0 && delivered_ns_ <= posted_ns) {
    delays_.Add(posted_ns - delivered_ns_);
  } else {
    delays_.Clear();
  }
  last_ns_ = posted_ns;
  delivered_ns_ = 0;
}

void PostForecast::Delivered(uint64_t now_ns) {
  if (last_ns_ != 0 && delivered_ns_ == 0 && now_ns >= last_ns_) delivered_ns_ = now_ns;
}

std::optional<PostWindow> PostForecast::Next() const {
  if (missed_ || gaps_.count() < kPostForecastMinGaps) return std::nullopt;
  const uint64_t pace = gaps_.mean();
  if (pace > kPostForecastMaxGapNs) return std::nullopt;
  // Looking costs dsmd its core for the whole window: only a short one, a
  // small share of the writer's pace, is worth the ring it saves.
  const uint64_t longest = std::min(kPostPollMaxNs, pace / kPostPollShare);
  if (longest < kPostPollWakeLeadNs + 2 * kPostPollMinHalfNs) return std::nullopt;
  const uint64_t max_half = (longest - kPostPollWakeLeadNs) / 2;
  std::optional<PostWindow> best;
  uint64_t best_half = 0;
  // The window `spans` after `from_ns`, if narrower than the best so far.
  auto consider = [&](const Spans& spans, uint64_t from_ns) {
    if (spans.count() < kPostForecastMinGaps) return;
    const std::optional<uint64_t> half = spans.Half(max_half);
    if (!half || (best && *half >= best_half)) return;
    const uint64_t expected = from_ns + spans.mean();
    const uint64_t wake = expected - std::min(expected, *half + kPostPollWakeLeadNs);
    if (wake <= from_ns) return;
    best = PostWindow{wake, expected + *half};
    best_half = *half;
  };
  consider(gaps_, last_ns_);
  if (delivered_ns_ != 0) consider(delays_, delivered_ns_);
  return best;
}

}  // namespace dsm
