#include "net/memory_transport.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "net/host_table.h"
#include "net/tuning.h"
#include "net/udp_framing.h"

namespace dsm::net {

// The switch: every port's MAC and IPv4, and the frames each port has not
// polled yet.
class MemoryWire::Hub {
 public:
  explicit Hub(const MemoryWireOptions& options) : options_(options) {}

  const MemoryWireOptions& options() const { return options_; }

  // A new port; nullopt (with `error`) for a MAC or IPv4 another port has.
  std::optional<uint64_t> Attach(const MacAddr& mac, uint32_t ipv4, size_t rx_frames,
                                 std::string* error) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, p] : ports_) {
      if (p.mac == mac || p.ipv4 == ipv4) {
        *error =
            "another port on the wire has MAC " + FormatMac(mac) + " or IPv4 " + FormatIpv4(ipv4);
        return std::nullopt;
      }
    }
    const uint64_t id = next_id_++;
    ports_[id] = Port{mac, ipv4, rx_frames, {}};
    return id;
  }

  void Detach(uint64_t port) {
    std::lock_guard<std::mutex> lock(mu_);
    ports_.erase(port);
  }

  // A frame a device took from port `from`: to the port with its destination
  // MAC, or (multicast, broadcast) to every other port.
  void Deliver(uint64_t from, std::vector<uint8_t> frame) {
    std::lock_guard<std::mutex> lock(mu_);
    bool queued = false;
    if ((frame[0] & 1) != 0) {  // frames are at least kMinFrameBytes long
      for (auto& [id, p] : ports_) {
        if (id != from) queued |= Queue(p, frame);
      }
    } else {
      auto it = std::find_if(ports_.begin(), ports_.end(), [&](const auto& kv) {
        return std::memcmp(frame.data(), kv.second.mac.data(), kv.second.mac.size()) == 0;
      });
      if (it == ports_.end()) {
        ++lost_;  // nobody has that MAC
      } else {
        queued = Queue(it->second, std::move(frame));
      }
    }
    if (queued) arrived_.notify_all();
  }

  // Moves up to `max` frames of `port` into `out`, oldest first.
  void Take(uint64_t port, size_t max, std::vector<std::vector<uint8_t>>* out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ports_.find(port);
    if (it == ports_.end()) return;
    std::deque<std::vector<uint8_t>>& inbox = it->second.inbox;
    while (!inbox.empty() && out->size() < max) {
      out->push_back(std::move(inbox.front()));
      inbox.pop_front();
    }
  }

  void Wait(uint64_t port, uint32_t timeout_us) {
    std::unique_lock<std::mutex> lock(mu_);
    arrived_.wait_for(lock, std::chrono::microseconds(timeout_us), [&] {
      auto it = ports_.find(port);
      return it == ports_.end() || !it->second.inbox.empty();
    });
  }

  uint64_t lost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

 private:
  struct Port {
    MacAddr mac;
    uint32_t ipv4;
    size_t rx_frames;  // most frames held unpolled
    std::deque<std::vector<uint8_t>> inbox;
  };

  bool Queue(Port& p, std::vector<uint8_t> frame) {
    if (p.inbox.size() >= p.rx_frames) {
      ++lost_;  // a full receive ring
      return false;
    }
    p.inbox.push_back(std::move(frame));
    return true;
  }

  const MemoryWireOptions options_;
  mutable std::mutex mu_;
  std::condition_variable arrived_;
  std::map<uint64_t, Port> ports_;
  uint64_t next_id_ = 1;
  uint64_t lost_ = 0;
};

namespace {

// How many queued frames read from a hold's memory. Shared by the hold and
// its frames: whichever goes last frees it.
struct HoldState {
  size_t frames = 0;
};

class MemoryTailHold final : public TailHold {
 public:
  size_t frames_in_use() const override { return state_->frames; }
  const std::shared_ptr<HoldState>& state() const { return state_; }

 private:
  std::shared_ptr<HoldState> state_ = std::make_shared<HoldState>();
};

// A queued frame's claim on a hold's memory, let go of when the frame
// leaves the queue (taken by the device, dropped, or the transport gone).
class TailClaim {
 public:
  TailClaim() = default;
  explicit TailClaim(std::shared_ptr<HoldState> state) : state_(std::move(state)) {
    if (state_) ++state_->frames;
  }
  TailClaim(TailClaim&& o) noexcept = default;
  TailClaim& operator=(TailClaim&& o) noexcept {
    if (this != &o) {
      Release();
      state_ = std::move(o.state_);
    }
    return *this;
  }
  ~TailClaim() { Release(); }
  const HoldState* state() const { return state_.get(); }

 private:
  void Release() {
    if (state_) --state_->frames;
    state_.reset();
  }
  std::shared_ptr<HoldState> state_;
};

struct QueuedFrame {
  std::vector<uint8_t> bytes;     // headers and the payload written into the frame
  std::span<const uint8_t> tail;  // the rest of the payload, read when the frame is taken
  TailClaim claim;
};

class MemoryTransport final : public Transport {
 public:
  MemoryTransport(std::shared_ptr<MemoryWire::Hub> hub, uint64_t port, HostTable hosts,
                  const PortConfig& config)
      : hub_(std::move(hub)),
        port_(port),
        hosts_(std::move(hosts)),
        udp_port_(config.udp_port),
        max_payload_bytes_(config.mtu_bytes - kIpv4HeaderBytes - kUdpHeaderBytes) {}
  ~MemoryTransport() override { hub_->Detach(port_); }

  size_t max_payload_bytes() const override { return max_payload_bytes_; }

  uint8_t* Reserve(Destination dest) override {
    // A second Reserve without Commit abandons the first frame and reuses its buffer.
    if (!reserved_) reserved_.emplace(kFrameHeaderBytes + max_payload_bytes_);
    reserved_dest_ = dest;
    return reserved_->data() + kFrameHeaderBytes;
  }

  void Commit(size_t payload_bytes) override { CommitFrame(payload_bytes, {}, nullptr); }

  std::unique_ptr<TailHold> NewTailHold() override {
    if (!hub_->options().tails_in_place) return nullptr;
    return std::make_unique<MemoryTailHold>();
  }

  void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                      TailHold* hold) override {
    auto* memory_hold = dynamic_cast<MemoryTailHold*>(hold);
    if (memory_hold == nullptr || !reserved_ || tail.size() < kMinTailBytes ||
        tail.size() > max_payload_bytes_) {
      Transport::CommitWithTail(reserved, head_bytes, tail, hold);  // a copy, as any frame
      return;
    }
    ++stats_.tx_tail_frames;
    CommitFrame(head_bytes + tail.size(), tail, memory_hold->state());
  }

  size_t DropTails(TailHold* hold) override {
    auto* memory_hold = dynamic_cast<MemoryTailHold*>(hold);
    if (memory_hold == nullptr) return 0;
    const size_t dropped = std::erase_if(tx_queue_, [&](const QueuedFrame& f) {
      return f.claim.state() == memory_hold->state().get();
    });
    stats_.tx_dropped += dropped;
    return dropped;
  }

  size_t Flush() override {
    size_t n = tx_queue_.size();
    const size_t per_flush = hub_->options().tx_frames_per_flush;
    if (per_flush != 0) n = std::min(n, per_flush);
    for (size_t i = 0; i < n; ++i) {
      QueuedFrame& f = tx_queue_.front();
      if (stopped_) {
        ++stats_.tx_dropped;
      } else {
        // The device reads the tail now: what the memory holds at this moment goes out.
        const size_t head = f.bytes.size();
        f.bytes.resize(head + f.tail.size());
        if (!f.tail.empty()) std::memcpy(f.bytes.data() + head, f.tail.data(), f.tail.size());
        ++stats_.tx_frames;
        stats_.tx_bytes += f.bytes.size();
        hub_->Deliver(port_, std::move(f.bytes));
      }
      tx_queue_.pop_front();  // lets go of the tail's memory
    }
    return stopped_ ? 0 : n;
  }

  size_t tx_backlog() const override { return tx_queue_.size(); }

  size_t Poll(size_t max, const RxFn& fn) override {
    std::vector<std::vector<uint8_t>> frames;
    hub_->Take(port_, max, &frames);
    size_t delivered = 0;
    for (const std::vector<uint8_t>& frame : frames) {
      const RxFrame f = ParseAndCount(frame, hosts_, udp_port_, &stats_);
      if (f.check != RxCheck::kOk) continue;
      ++delivered;
      fn(f.payload, f.source_host);
    }
    return delivered;
  }

  void WaitForFrames(uint32_t timeout_us) override {
    if (timeout_us != 0) hub_->Wait(port_, timeout_us);
  }

  TransportStats stats() const override { return stats_; }

  // The port leaves the wire: nothing more arrives, and frames flushed from
  // now on are dropped.
  void Stop() override {
    stopped_ = true;
    hub_->Detach(port_);
  }

 private:
  // Queues the reserved frame with `payload_bytes` of payload, the last
  // tail.size() of them read from `tail` when the frame is taken.
  void CommitFrame(size_t payload_bytes, std::span<const uint8_t> tail,
                   std::shared_ptr<HoldState> hold) {
    if (!reserved_) return;  // nothing reserved
    std::vector<uint8_t> frame = std::move(*reserved_);
    reserved_.reset();
    const std::optional<Endpoint> to = hosts_.Resolve(reserved_dest_);
    if (!to || payload_bytes > max_payload_bytes_) {
      ++stats_.tx_dropped;  // an unknown peer or an oversized payload: never sent
      return;
    }
    WriteFrameHeaders(frame.data(),
                      {hosts_.mac(), to->mac, hosts_.ipv4(), to->ipv4, udp_port_, next_ip_id_++},
                      payload_bytes);
    size_t bytes = kFrameHeaderBytes + payload_bytes - tail.size();
    if (bytes < kMinFrameBytes && tail.empty()) {
      std::memset(frame.data() + bytes, 0, kMinFrameBytes - bytes);
      bytes = kMinFrameBytes;
    }
    frame.resize(bytes);
    // The device takes at least one frame per Flush: the queue stays below
    // kMaxTxBacklogFrames, where DpdkTransport's Commit would drop.
    if (tx_queue_.size() >= kMaxQueuedTxFrames) Flush();
    tx_queue_.push_back({std::move(frame), tail, TailClaim(std::move(hold))});
  }

  std::shared_ptr<MemoryWire::Hub> hub_;
  const uint64_t port_;
  HostTable hosts_;
  const uint16_t udp_port_;
  const size_t max_payload_bytes_;
  TransportStats stats_;
  bool stopped_ = false;

  std::optional<std::vector<uint8_t>> reserved_;  // between Reserve and Commit
  Destination reserved_dest_;
  std::deque<QueuedFrame> tx_queue_;  // committed, not yet taken by the device
  uint16_t next_ip_id_ = 0;
};

}  // namespace

MemoryWire::MemoryWire(const MemoryWireOptions& options) : hub_(std::make_shared<Hub>(options)) {}

MemoryWire::~MemoryWire() = default;

std::unique_ptr<Transport> MemoryWire::Open(const PortConfig& config, std::string* error) {
  auto fail = [&](const std::string& message) {
    *error = "opening a memory port for host " + std::to_string(config.host_id) + ": " + message;
    return nullptr;
  };
  if (config.udp_port == 0) return fail("udp_port must not be 0");
  if (config.mtu_bytes <= kIpv4HeaderBytes + kUdpHeaderBytes || config.mtu_bytes > 65535) {
    return fail("mtu_bytes must leave room for a payload and be at most 65535, got " +
                std::to_string(config.mtu_bytes));
  }
  if (config.rx_ring == 0) return fail("rx_ring must be > 0");
  MacAddr mac = config.mac;
  if (mac == MacAddr{}) {
    mac = {0x02,
           0,
           0,
           0,
           static_cast<uint8_t>(config.host_id >> 8),
           static_cast<uint8_t>(config.host_id & 0xff)};
  }
  std::string why;
  std::optional<HostTable> hosts =
      HostTable::Build(mac, config.ipv4, config.peers, config.groups, &why);
  if (!hosts) return fail(why);
  const std::optional<uint64_t> port = hub_->Attach(mac, config.ipv4, config.rx_ring, &why);
  if (!port) return fail(why);
  return std::make_unique<MemoryTransport>(hub_, *port, std::move(*hosts), config);
}

uint64_t MemoryWire::frames_lost() const { return hub_->lost(); }

}  // namespace dsm::net
