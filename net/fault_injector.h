// WithFaults (transport.h): a Transport decorator that drops, duplicates,
// reorders or corrupts frames on the way out, deterministically for a seed.
//
// Each committed frame draws one uniform number and meets at most one fault:
// [0, drop) dropped, then duplicate, reorder, corrupt in that order (so the
// probabilities must sum to at most 1; larger sums are scaled down). Payloads
// are staged in the decorator (one copy) because a duplicate or a held-back
// frame must outlive the inner transport's buffer; when only drops are asked
// for, frames go straight through (tails read in place included), so a run
// with loss costs what the same run without the injector costs, less what it
// drops. A reordered frame is held
// back and sent right after the next frame that is sent, whenever that is
// (even after a Flush); it counts as reordered then, when it has been
// overtaken. Several frames in a row may be held; they keep their order.
#ifndef DSM_NET_FAULT_INJECTOR_H_
#define DSM_NET_FAULT_INJECTOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "net/transport.h"

namespace dsm::net {

class FaultInjector final : public Transport {
 public:
  FaultInjector(std::unique_ptr<Transport> inner, const FaultConfig& faults);

  size_t max_payload_bytes() const override { return inner_->max_payload_bytes(); }
  uint8_t* Reserve(Destination dest) override;
  void Commit(size_t payload_bytes) override;
  std::unique_ptr<TailHold> NewTailHold() override;
  void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                      TailHold* hold) override;
  size_t DropTails(TailHold* hold) override;
  size_t Flush() override { return inner_->Flush(); }
  size_t tx_backlog() const override { return inner_->tx_backlog(); }
  size_t Poll(size_t max, const RxFn& fn) override { return inner_->Poll(max, fn); }
  void WaitForFrames(uint32_t timeout_us) override { inner_->WaitForFrames(timeout_us); }
  int rx_wake_fd() const override { return inner_->rx_wake_fd(); }
  TransportStats stats() const override;
  void Stop() override { inner_->Stop(); }

 private:
  struct Frame {
    Destination dest;
    std::vector<uint8_t> payload;
  };
  void Send(const Destination& dest, const uint8_t* payload, size_t bytes);
  // One draw per frame: whether drop-only mode drops it (counted).
  bool DrawDrop();
  void ReleaseHeld();

  std::unique_ptr<Transport> inner_;
  FaultConfig faults_;
  bool drop_only_ = false;  // frames pass through to the inner transport
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  Destination staged_dest_;
  std::vector<uint8_t> staged_;  // max_payload_bytes()
  bool reserved_ = false;
  std::deque<Frame> held_;       // reordered: wait for the next frame sent
  TransportStats faults_stats_;  // only the faults_* fields are used
};

}  // namespace dsm::net

#endif  // DSM_NET_FAULT_INJECTOR_H_
