// A byte rate for managed areas' transfers (a token bucket): bytes accrue at
// `bytes_per_second` up to `burst_bytes`, and sending spends them. Lines that
// must go whatever the budget (managed_selection.h: due by their lag) may
// spend beyond what is there; the debt is paid from what accrues next, so
// over any stretch of time the bytes spent stay within the rate plus the
// burst plus what was due.
#ifndef DSM_COHERENCE_BYTE_BUDGET_H_
#define DSM_COHERENCE_BYTE_BUDGET_H_

#include <cstdint>

namespace dsm {

class ByteBudget {
 public:
  // Starts full: the first transfer may spend a whole burst.
  ByteBudget(uint64_t bytes_per_second, uint64_t burst_bytes, uint64_t now_ns);

  // Adds what accrued since the last refill.
  void Refill(uint64_t now_ns);
  // Bytes that may be spent now (0 while in debt).
  uint64_t available() const { return tokens_ > 0 ? static_cast<uint64_t>(tokens_) : 0; }
  // Spends `bytes`, going into debt if they are more than available().
  void Spend(uint64_t bytes) { tokens_ -= static_cast<int64_t>(bytes); }

 private:
  uint64_t rate_;
  int64_t burst_;
  int64_t tokens_;
  uint64_t last_ns_;
  uint64_t carry_ = 0;  // rate x ns not yet a whole byte (units of 1e-9 byte)
};

}  // namespace dsm

#endif  // DSM_COHERENCE_BYTE_BUDGET_H_
