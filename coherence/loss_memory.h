// Whether the receivers of an area lost frames lately: the sender then keeps
// each version it ships in a copy of its own, so missing frames can still be
// resent after the writer took the version's buffer back. Loss is "recent" for
// a time after the last report of missing frames, and ends early once that
// many transfers went out since: one lossy burst (a whole-area transfer
// overflowing a receive ring) says little about the small deltas after it.
#ifndef DSM_COHERENCE_LOSS_MEMORY_H_
#define DSM_COHERENCE_LOSS_MEMORY_H_

#include <cstdint>

namespace dsm {

class LossMemory {
 public:
  LossMemory(uint64_t window_ns, uint32_t window_transfers)
      : window_ns_(window_ns), window_transfers_(window_transfers) {}

  // A receiver reported frames missing.
  void OnLoss(uint64_t now_ns) {
    last_loss_ns_ = now_ns;
    lost_once_ = true;
    transfers_since_ = 0;
  }
  // A transfer's frames all went out.
  void OnTransferSent() {
    if (transfers_since_ < window_transfers_) ++transfers_since_;
  }
  bool Recent(uint64_t now_ns) const {
    return lost_once_ && now_ns - last_loss_ns_ < window_ns_ && transfers_since_ < window_transfers_;
  }

 private:
  uint64_t window_ns_;
  uint32_t window_transfers_;
  uint64_t last_loss_ns_ = 0;
  bool lost_once_ = false;
  uint32_t transfers_since_ = 0;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_LOSS_MEMORY_H_
