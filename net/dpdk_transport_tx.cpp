// Sending: frames are built in place in mbufs (Reserve/Commit), queued, and
// handed to the device in bursts by Flush, spaced by the pacer when paced.
#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "net/dpdk_transport.h"
#include "net/udp_framing.h"

namespace dsm::net {
namespace {

// The shared info of attached tails: DPDK counts the mbufs attached to it in
// its refcnt, plus one for the hold itself. Whichever lets go last frees it.
class DpdkTailHold final : public TailHold {
 public:
  // The refcnt is 16 bits wide.
  static constexpr size_t kMaxFrames = UINT16_MAX - 1;

  DpdkTailHold() : info_(new rte_mbuf_ext_shared_info{}) {
    info_->free_cb = [](void*, void* opaque) { delete static_cast<rte_mbuf_ext_shared_info*>(opaque); };
    info_->fcb_opaque = info_;
    rte_mbuf_ext_refcnt_set(info_, 1);
  }
  ~DpdkTailHold() override {
    if (rte_mbuf_ext_refcnt_update(info_, -1) == 0) delete info_;
  }
  size_t frames_in_use() const override { return rte_mbuf_ext_refcnt_read(info_) - 1u; }
  rte_mbuf_ext_shared_info* info() { return info_; }

 private:
  rte_mbuf_ext_shared_info* info_;
};

uint64_t WireBits(const rte_mbuf* m) {
  return (uint64_t{m->pkt_len} + kWireOverheadBytesPerFrame) * 8;
}

}  // namespace

uint8_t* DpdkTransport::Reserve(Destination dest) {
  // A second Reserve without Commit abandons the first frame and reuses its buffer.
  if (reserved_ == nullptr) {
    reserved_ = rte_pktmbuf_alloc(port_->pool());
    if (reserved_ == nullptr) {
      ++stats_.tx_dropped;
      return nullptr;
    }
  }
  reserved_dest_ = dest;
  return rte_pktmbuf_mtod(reserved_, uint8_t*) + kFrameHeaderBytes;
}

void DpdkTransport::Commit(size_t payload_bytes) { CommitFrame(payload_bytes, nullptr, {}); }

void DpdkTransport::CommitShared(size_t payload_bytes, std::span<DpdkTransport* const> also) {
  CommitFrame(payload_bytes, nullptr, also);
}

std::unique_ptr<TailHold> DpdkTransport::NewTailHold() {
  if (port_->tail_pool() == nullptr) return nullptr;
  return std::make_unique<DpdkTailHold>();
}

rte_mbuf* DpdkTransport::AttachTail(std::span<const uint8_t> tail, TailHold* hold) {
  auto* dpdk_hold = dynamic_cast<DpdkTailHold*>(hold);
  if (dpdk_hold == nullptr || reserved_ == nullptr || port_->tail_pool() == nullptr ||
      tail.size() < kMinTailBytes || tail.size() > max_payload_bytes_ ||
      dpdk_hold->frames_in_use() >= DpdkTailHold::kMaxFrames) {
    return nullptr;
  }
  rte_mbuf* t = rte_pktmbuf_alloc(port_->tail_pool());
  if (t == nullptr) return nullptr;
  // The device reads the tail where it is; the hold counts the frame until
  // the device frees its mbuf (for the devices we attach to: as it sends it).
  auto* addr = const_cast<uint8_t*>(tail.data());
  rte_pktmbuf_attach_extbuf(t, addr, static_cast<rte_iova_t>(reinterpret_cast<uintptr_t>(addr)),
                            static_cast<uint16_t>(tail.size()), dpdk_hold->info());
  rte_mbuf_ext_refcnt_update(dpdk_hold->info(), 1);
  ++stats_.tx_tail_frames;
  t->data_len = static_cast<uint16_t>(tail.size());
  t->pkt_len = t->data_len;
  return t;
}

void DpdkTransport::CommitWithTail(uint8_t* reserved, size_t head_bytes,
                                   std::span<const uint8_t> tail, TailHold* hold) {
  rte_mbuf* t = AttachTail(tail, hold);
  if (t == nullptr) {
    Transport::CommitWithTail(reserved, head_bytes, tail, hold);  // a copy, as any frame
    return;
  }
  CommitFrame(head_bytes + tail.size(), t, {});
}

void DpdkTransport::CommitSharedWithTail(uint8_t* reserved, size_t head_bytes,
                                         std::span<const uint8_t> tail, TailHold* hold,
                                         std::span<DpdkTransport* const> also) {
  const bool attach = std::all_of(also.begin(), also.end(),
                                  [](const DpdkTransport* t) { return t->attaches_tails(); });
  rte_mbuf* t = attach ? AttachTail(tail, hold) : nullptr;
  if (t == nullptr && reserved != nullptr) {
    // Copied once, into the frame every port sends.
    const size_t room = max_payload_bytes_ - std::min(head_bytes, max_payload_bytes_);
    std::memcpy(reserved + head_bytes, tail.data(), std::min(tail.size(), room));
  }
  CommitFrame(head_bytes + tail.size(), t, also);  // oversized: dropped and counted
}

bool DpdkTransport::SendsSameFramesAs(const DpdkTransport& other) const {
  return hosts_.mac() == other.hosts_.mac() && hosts_.ipv4() == other.hosts_.ipv4() &&
         udp_port_ == other.udp_port_;
}

size_t DpdkTransport::DropTails(TailHold* hold) {
  auto* dpdk_hold = dynamic_cast<DpdkTailHold*>(hold);
  if (dpdk_hold == nullptr) return 0;
  const size_t before = tx_queue_.size();
  std::erase_if(tx_queue_, [&](rte_mbuf* m) {
    const rte_mbuf* tail = m->next;
    if (tail == nullptr || !RTE_MBUF_HAS_EXTBUF(tail) || tail->shinfo != dpdk_hold->info()) return false;
    rte_pktmbuf_free(m);  // the chain: the tail lets go of the hold
    return true;
  });
  const size_t dropped = before - tx_queue_.size();
  // (Urgent frames dropped here only make later ones queue a little further back.)
  urgent_queued_ = std::min(urgent_queued_, tx_queue_.size());
  stats_.tx_dropped += dropped;
  return dropped;
}

void DpdkTransport::CommitFrame(size_t payload_bytes, rte_mbuf* tail,
                                std::span<DpdkTransport* const> also) {
  rte_mbuf* m = reserved_;
  if (m == nullptr) return;  // nothing reserved (Reserve failed and counted it)
  reserved_ = nullptr;
  const std::optional<Endpoint> to = hosts_.Resolve(reserved_dest_);
  if (!to || payload_bytes > max_payload_bytes_) {
    // An unknown peer or an oversized payload is the caller's bug; never send it.
    rte_pktmbuf_free(m);
    if (tail != nullptr) rte_pktmbuf_free(tail);
    ++stats_.tx_dropped;
    for (DpdkTransport* t : also) ++t->stats_.tx_dropped;
    return;
  }
  uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
  WriteFrameHeaders(frame,
                    {hosts_.mac(), to->mac, hosts_.ipv4(), to->ipv4, udp_port_, next_ip_id_++},
                    payload_bytes);
  size_t bytes = kFrameHeaderBytes + payload_bytes;
  if (bytes < kMinFrameBytes) {
    std::memset(frame + bytes, 0, kMinFrameBytes - bytes);  // (never with a tail: >= kMinTailBytes)
    bytes = kMinFrameBytes;
  }
  const size_t tail_bytes = tail != nullptr ? tail->data_len : 0;
  m->data_len = static_cast<uint16_t>(bytes - tail_bytes);
  m->pkt_len = static_cast<uint32_t>(bytes);
  if (tail != nullptr) {
    m->next = tail;
    m->nb_segs = 2;
  }
  // Every port's reference is taken before any port may send (and free) it.
  if (!also.empty()) rte_pktmbuf_refcnt_update(m, static_cast<int16_t>(also.size()));
  Enqueue(m, reserved_dest_.urgent);
  for (DpdkTransport* t : also) t->Enqueue(m, reserved_dest_.urgent);
}

void DpdkTransport::Enqueue(rte_mbuf* m, bool urgent) {
  if (tx_queue_.size() >= kMaxQueuedTxFrames) Flush();
  if (tx_queue_.size() >= kMaxTxBacklogFrames) {
    rte_pktmbuf_free(m);  // kMaxTxBacklogFrames already wait for the device
    ++stats_.tx_dropped;
    return;
  }
  if (urgent) {
    tx_queue_.insert(tx_queue_.begin() + static_cast<std::ptrdiff_t>(urgent_queued_++), m);
  } else {
    tx_queue_.push_back(m);
  }
}

size_t DpdkTransport::Flush() {
  size_t sent = 0;
  size_t i = 0;
  bool refused = false;
  while (i < tx_queue_.size() && !refused) {
    uint16_t n = static_cast<uint16_t>(std::min<size_t>(kTxBurstFrames, tx_queue_.size() - i));
    if (pacer_.enabled()) {
      uint16_t conforming = 0;
      while (conforming < n && pacer_.TryConsume(WireBits(tx_queue_[i + conforming]))) {
        ++conforming;
      }
      if (conforming == 0) {
        WaitForPacer(WireBits(tx_queue_[i]));
        continue;
      }
      n = conforming;
    }
    const size_t done = SendBurst(&tx_queue_[i], n);
    sent += done;
    i += done;
    refused = done < n;
  }
  const uint64_t now = rte_get_tsc_cycles();
  if (!refused || sent > 0) tx_progress_tsc_ = now;
  if (refused && now - tx_progress_tsc_ > tx_stall_tsc_) {
    // Nobody drains the device: waiting longer would only hold up the frames
    // for the others. Drop what waits, as a lossy link would.
    for (size_t j = i; j < tx_queue_.size(); ++j) rte_pktmbuf_free(tx_queue_[j]);
    stats_.tx_dropped += tx_queue_.size() - i;
    i = tx_queue_.size();
  }
  // What the device refused waits, in order, for the next Flush.
  tx_queue_.erase(tx_queue_.begin(), tx_queue_.begin() + static_cast<std::ptrdiff_t>(i));
  urgent_queued_ -= std::min(urgent_queued_, i);
  return sent;
}

size_t DpdkTransport::SendBurst(rte_mbuf** frames, uint16_t n) {
  uint64_t bytes = 0;  // read before the device may free the mbufs
  uint16_t done = 0;
  uint32_t idle = 0;
  while (done < n) {
    for (uint16_t j = done; j < n; ++j) bytes += frames[j]->pkt_len;
    const uint16_t k = port_->TxBurst(frames + done, static_cast<uint16_t>(n - done));
    for (uint16_t j = static_cast<uint16_t>(done + k); j < n; ++j) bytes -= frames[j]->pkt_len;
    done = static_cast<uint16_t>(done + k);
    if (k != 0) {
      idle = 0;
    } else if (++idle > kTxMaxIdleRetries) {
      break;
    } else {
      rte_delay_us_block(kTxRetryPauseUs);
    }
  }
  stats_.tx_frames += done;
  stats_.tx_bytes += bytes;
  return done;
}

void DpdkTransport::WaitForPacer(uint64_t bits) {
  const uint64_t hz = rte_get_tsc_hz();
  for (uint64_t ticks = pacer_.DelayTicks(bits); ticks != 0; ticks = pacer_.DelayTicks(bits)) {
    const uint64_t ns = ticks * 1'000'000'000ULL / hz;
    if (ns > kPacerSleepAboveNs) {
      // Sleep most of it; the scheduler's wake-up slack is spun away below.
      const uint64_t sleep_ns = ns - kPacerSleepAboveNs / 2;
      timespec ts{static_cast<time_t>(sleep_ns / 1'000'000'000ULL),
                  static_cast<long>(sleep_ns % 1'000'000'000ULL)};
      clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
    } else {
      rte_pause();
    }
  }
}

}  // namespace dsm::net
