#include "net/pacer.h"

#include <algorithm>
#include <utility>

namespace dsm::net {

Pacer::Pacer(uint64_t bits_per_sec, uint64_t ticks_per_sec, uint64_t burst_bits, Clock now)
    : bits_per_sec_(bits_per_sec),
      ticks_per_sec_(ticks_per_sec),
      burst_ticks_(bits_per_sec == 0 ? 0 : burst_bits * ticks_per_sec / bits_per_sec),
      now_(std::move(now)) {
  if (enabled()) tat_ = now_();
}

uint64_t Pacer::DelayTicks(uint64_t /*bits*/) const {
  if (!enabled()) return 0;
  const uint64_t now = now_();
  // The frame conforms when the backlog ahead of it fits in the bucket.
  const uint64_t earliest = tat_ > burst_ticks_ ? tat_ - burst_ticks_ : 0;
  return earliest > now ? earliest - now : 0;
}

void Pacer::Consume(uint64_t bits) {
  if (!enabled()) return;
  // bits * ticks_per_sec stays below 2^63 for frames < 2^20 bits and clocks < 2^40 Hz.
  const uint64_t num = bits * ticks_per_sec_ + remainder_num_;
  const uint64_t cost = num / bits_per_sec_;
  remainder_num_ = num % bits_per_sec_;
  tat_ = std::max(tat_, now_()) + cost;
}

bool Pacer::TryConsume(uint64_t bits) {
  if (DelayTicks(bits) != 0) return false;
  Consume(bits);
  return true;
}

}  // namespace dsm::net
