#include "coherence/byte_budget.h"

#include <algorithm>

namespace dsm {

ByteBudget::ByteBudget(uint64_t bytes_per_second, uint64_t burst_bytes, uint64_t now_ns)
    : rate_(bytes_per_second),
      burst_(static_cast<int64_t>(burst_bytes)),
      tokens_(static_cast<int64_t>(burst_bytes)),
      last_ns_(now_ns) {}

void ByteBudget::Refill(uint64_t now_ns) {
  if (now_ns <= last_ns_) return;
  // In whole seconds and the rest, and the rate in whole GB/s and the rest,
  // so that no product overflows.
  constexpr uint64_t kNsPerS = 1'000'000'000;
  const uint64_t elapsed = now_ns - last_ns_;
  last_ns_ = now_ns;
  const uint64_t ns = elapsed % kNsPerS;
  const uint64_t fraction = ns * (rate_ % kNsPerS) + carry_;  // < 2e18
  const uint64_t bytes = elapsed / kNsPerS * rate_ + ns * (rate_ / kNsPerS) + fraction / kNsPerS;
  carry_ = fraction % kNsPerS;
  const int64_t room = burst_ - tokens_;
  if (room <= 0) return;
  tokens_ += static_cast<int64_t>(std::min<uint64_t>(bytes, static_cast<uint64_t>(room)));
  if (tokens_ == burst_) carry_ = 0;  // full: nothing carries over
}

}  // namespace dsm
