#include "daemon/post_forecast.h"

#include <algorithm>

#include "daemon/tunables.h"

namespace dsm {

void PostForecast::Posted(uint64_t posted_ns) {
  missed_ = false;
  if (last_ns_ == 0 || posted_ns <= last_ns_) {
    last_ns_ = std::max(last_ns_, posted_ns);
    return;
  }
  const uint64_t gap = posted_ns - last_ns_;
  last_ns_ = posted_ns;
  const uint32_t held = std::min(count_, kGaps);
  const uint64_t mean = held ? sum_ns_ / held : 0;
  if (held == 0 || gap > kPostForecastPaceChange * mean || gap * kPostForecastPaceChange < mean) {
    // The first gap, or the writer changed pace (a pause, a new phase):
    // start over from this gap rather than average across the change.
    count_ = 0;
    sum_ns_ = 0;
  }
  uint64_t& slot = gaps_ns_[count_ % kGaps];
  if (count_ >= kGaps) sum_ns_ -= slot;
  slot = gap;
  sum_ns_ += gap;
  ++count_;
}

std::optional<PostWindow> PostForecast::Next() const {
  if (missed_ || count_ < kPostForecastMinGaps) return std::nullopt;
  const uint32_t held = std::min(count_, kGaps);
  const uint64_t mean = sum_ns_ / held;
  if (mean > kPostForecastMaxGapNs) return std::nullopt;
  // Looking costs dsmd its core for the whole window: only a short one, a
  // small share of the writer's pace, is worth the ring it saves.
  const uint64_t longest = std::min(kPostPollMaxNs, mean / kPostPollShare);
  if (longest < kPostPollWakeLeadNs + 2 * kPostPollMinHalfNs) return std::nullopt;
  // Twice the gaps' mean deviation (about two standard deviations of a
  // normal spread) and a margin, or as much of that as fits.
  uint64_t deviation = 0;
  for (uint32_t i = 0; i < held; ++i) {
    deviation += gaps_ns_[i] > mean ? gaps_ns_[i] - mean : mean - gaps_ns_[i];
  }
  const uint64_t half = std::min(kPostPollMinHalfNs + 2 * deviation / held,
                                 (longest - kPostPollWakeLeadNs) / 2);
  // Worth it only if it would have caught most of the recent posts.
  uint32_t caught = 0;
  for (uint32_t i = 0; i < held; ++i) {
    caught += (gaps_ns_[i] > mean ? gaps_ns_[i] - mean : mean - gaps_ns_[i]) <= half;
  }
  if (caught * kPostForecastCaughtOf < held * kPostForecastCaught) return std::nullopt;
  const uint64_t expected = last_ns_ + mean;
  const uint64_t wake = expected - std::min(expected, half + kPostPollWakeLeadNs);
  const uint64_t until = expected + half;
  if (wake <= last_ns_) return std::nullopt;
  return PostWindow{wake, until};
}

}  // namespace dsm
