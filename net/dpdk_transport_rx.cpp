// Receiving: bursts from the device, each frame validated (udp_framing.h) and
// either delivered or counted by why it was dropped; waiting for frames with
// RX interrupts where the device has them.
#include <rte_mbuf.h>
#include <time.h>

#include <algorithm>

#include "net/dpdk_transport.h"
#include "net/udp_framing.h"

namespace dsm::net {
namespace {

void SleepUs(uint32_t us) {
  timespec ts{static_cast<time_t>(us / 1'000'000), static_cast<long>(us % 1'000'000) * 1000};
  clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
}

}  // namespace

size_t DpdkTransport::Poll(size_t max, const RxFn& fn) {
  port_->KeepConnected();
  size_t delivered = 0;
  size_t examined = 0;  // bounds the call by `max` frames even when all are dropped
  while (rx_stash_begin_ < rx_stash_end_ && examined < max) {
    Deliver(rx_stash_[rx_stash_begin_++], fn, &delivered);
    ++examined;
  }
  rte_mbuf* burst[kRxBurstFrames];
  while (examined < max) {
    const uint16_t want = static_cast<uint16_t>(std::min<size_t>(kRxBurstFrames, max - examined));
    const uint16_t n = port_->RxBurst(burst, want);
    for (uint16_t i = 0; i < n; ++i) Deliver(burst[i], fn, &delivered);
    examined += n;
    if (n < want) break;
  }
  return delivered;
}

void DpdkTransport::Deliver(rte_mbuf* m, const RxFn& fn, size_t* delivered) {
  // Pools are sized so a frame is one segment; a chain means a device that
  // did not honour that, and its frame is not trusted.
  if (m->nb_segs != 1) {
    ++stats_.rx_dropped_malformed;
    rte_pktmbuf_free(m);
    return;
  }
  const RxFrame frame = ParseAndCount({rte_pktmbuf_mtod(m, const uint8_t*), m->data_len}, hosts_,
                                      udp_port_, &stats_);
  if (frame.check == RxCheck::kOk) {
    ++*delivered;
    fn(frame.payload, frame.source_host);
  }
  rte_pktmbuf_free(m);
}

void DpdkTransport::WaitForFrames(uint32_t timeout_us) {
  if (timeout_us == 0 || rx_stash_begin_ < rx_stash_end_) return;
  if (timeout_us < kMinInterruptWaitUs || !port_->ArmRxInterrupt()) {
    SleepUs(timeout_us);
    return;
  }
  // Frames that arrived before arming raise no interrupt: look once, and keep
  // what is found for the next Poll.
  rx_stash_begin_ = 0;
  rx_stash_end_ = port_->RxBurst(rx_stash_.data(), kRxBurstFrames);
  if (rx_stash_end_ == 0) port_->WaitRxInterrupt(static_cast<int>(timeout_us / 1000));
  port_->DisarmRxInterrupt();
}

}  // namespace dsm::net
