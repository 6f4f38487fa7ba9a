// A model of remote sync: one writer area, the sending daemon (ReplicaSender,
// a shadow copy, DataFrameWriter plans) and three reader hosts (ReplicaReceiver,
// VersionPublisher, reader buffers and a staging copy each; frames go straight
// into the buffer of the next version, or into the staging copy when local
// readers pin every spare buffer), over a simulated network that drops, duplicates,
// delays, reorders and corrupts frames and acknowledgements. Time is a number.
//
// The daemon side mirrors daemon/remote_export.cpp and daemon/remote_replica.cpp:
// the shadow moves only when !AwaitingAcks; an ACK with kFlagFull ("I hold
// nothing yet") is OnAckNothing(host); missing ranges are resent from the plan of a
// transfer of the current shadow, and reported lost (OnLostTransfer) for any other; receivers ack a completed version at once,
// frames they cannot use at most once per kAckMinGapNs, and NACK missing frames
// after kNackAfterNs of quiet.
//
// Checked: every completed version, and every local publish of it, is byte for
// byte the writer's content at that version; every delta covers what changed
// since its base; and once the writer stops, every replica converges to the
// final version (and the sender knows it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/replica_receiver.h"
#include "coherence/replica_sender.h"
#include "coherence/version_publisher.h"
#include "coherence/wire_format.h"
#include "tests/support/env.h"

namespace dsm {
namespace {

using Bytes = std::vector<uint8_t>;
using wire::DropReason;

constexpr uint64_t kTickNs = 1'000'000;
// As daemon/tunables.h: kRetransmitTimeoutNs (frames are sent at once here, so
// it does not grow with the send time), kNackAfterNs, kAckMinGapNs.
constexpr uint64_t kRtoNs = 20'000'000;
constexpr uint64_t kNackAfterNs = 3'000'000;
constexpr uint64_t kAckMinGapNs = 2'000'000;
constexpr uint16_t kWriterHost = 1;
constexpr size_t kHistory = 48;  // collected versions kept for comparison

struct VectorSink {
  uint8_t* Reserve(size_t max_bytes) {
    scratch.assign(max_bytes, 0xcd);
    return scratch.data();
  }
  void Commit(size_t bytes) {
    frames.emplace_back(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(bytes));
  }
  std::vector<Bytes> frames;
  Bytes scratch;
};

struct Params {
  size_t area_bytes = 64 * 1024;
  size_t frame_bytes = 1472;
  uint64_t seed = 1;
  int hosts = 3;
  int write_rounds = 200;
  int settle_rounds = 1500;  // at most, after the writer stops
  uint64_t first_version = 1;  // the version of the area at the first collect
  int late_subscriber_round = -1;  // the last host subscribes then (-1: at once)
  int restart_round = -1;          // the second host's daemon restarts then
  double drop = 0.05, duplicate = 0.05, late = 0.05, corrupt = 0.01;
  double ack_drop = 0.05, multicast_to_all = 0.2;
  // Each spare buffer of a replica is pinned by a local reader this often when
  // the next version is aimed or published (dsmd then stages, or defers).
  double pin = 0.1;
  double slow_host_drop = 0;  // frames to the last host are also dropped this often
  // The second host is cut off (nothing reaches it, nothing from it arrives)
  // from round cut_round for cut_rounds rounds; membership marks it down
  // after down_after_rounds of them, and up again when the cut heals.
  int cut_round = -1;
  int cut_rounds = 0;
  int down_after_rounds = 60;
  // Scripted runs: which rounds the writer changes something (default: random),
  // and frames to lose on top of the random drops.
  std::function<bool(int round)> write_at;
  std::function<bool(uint16_t host, const wire::Header& h, int round)> lose_frame;
};

class Model {
 public:
  explicit Model(const Params& p)
      : p_(p),
        lines_((p.area_bytes + kLineBytes - 1) / kLineBytes),
        rounded_(lines_ * kLineBytes),
        rng_(p.seed),
        writer_(rounded_, 0),
        dirty_(p.area_bytes),
        sender_(p.area_bytes) {
    for (size_t i = 0; i < p.area_bytes; ++i) writer_[i] = static_cast<uint8_t>(rng_());
    wv_ = p.first_version;
    for (int i = 0; i < p.hosts; ++i) {
      replicas_.push_back(std::make_unique<Replica>());
      replicas_.back()->host = static_cast<uint16_t>(10 + i);
    }
    for (int i = 0; i < p.hosts; ++i) {
      if (i == p.hosts - 1 && p.late_subscriber_round >= 0) continue;
      StartReplica(*replicas_[static_cast<size_t>(i)]);
    }
  }

  // Runs the writer phase, then lets the replicas settle. Returns whether they converged.
  bool Run() {
    for (int i = 0; i < p_.write_rounds; ++i) {
      Round(true);
      if (::testing::Test::HasFatalFailure() || failures_ > kMaxReported) return false;
    }
    for (int i = 0; i < p_.settle_rounds; ++i) {
      if (Converged()) return true;
      Round(false);
      if (::testing::Test::HasFatalFailure() || failures_ > kMaxReported) return false;
    }
    return Converged();
  }

  void ExpectConvergedExactly() const {
    for (const auto& r : replicas_) {
      SCOPED_TRACE(Describe(*r));
      ASSERT_TRUE(r->subscribed);
      EXPECT_TRUE(r->rx->has_base());
      EXPECT_EQ(r->rx->complete_version(), wv_);
      EXPECT_EQ(std::memcmp(r->buffers[r->latest].data(), writer_.data(), rounded_), 0);
    }
  }

  void ExpectTraffic() const {
    for (const auto& r : replicas_) EXPECT_GE(r->completions, 3u) << Describe(*r);
    EXPECT_GE(collects_, 5u);
    EXPECT_GT(frames_delivered_, 100u);
    EXPECT_GT(stats_[static_cast<size_t>(DropReason::kDuplicate)], 0u);
    EXPECT_GT(corrupt_rejected_, 0u);
    EXPECT_GT(resent_frames_, 0u);
  }

  uint64_t collects_while_down() const { return collects_while_down_; }

  std::string Summary() const {
    std::string s = "seed " + std::to_string(p_.seed) + " area " + std::to_string(p_.area_bytes) +
                    ": writer at " + std::to_string(wv_) + ", sender at " +
                    std::to_string(sender_.version()) + ", round " + std::to_string(round_) +
                    ", collects " + std::to_string(collects_) + ", transfers " +
                    std::to_string(transfers_) + ", frames " + std::to_string(frames_delivered_) +
                    ", resent " + std::to_string(resent_frames_) + ", corrupt rejected " +
                    std::to_string(corrupt_rejected_) + ", drops:";
    for (size_t i = 1; i < stats_.size(); ++i) {
      if (stats_[i] != 0) {
        s += " " + std::string(wire::DropReasonName(static_cast<DropReason>(i))) + "=" +
             std::to_string(stats_[i]);
      }
    }
    for (const auto& r : replicas_) s += "; " + Describe(*r);
    return s;
  }

 private:
  static constexpr int kMaxReported = 5;
  static constexpr uint16_t kCutHost = 11;

  struct Packet {
    Bytes bytes;
    bool corrupt = false;
    int due_round = 0;
  };
  struct AckMsg {
    uint16_t host = 0;
    uint64_t complete = 0;
    bool has_base = false;
    uint64_t assembling_version = 0;
    uint32_t transfer = 0;
    std::vector<wire::SeqRange> missing;
    int due_round = 0;
  };
  struct Replica {
    uint16_t host = 0;
    bool subscribed = false;
    Bytes staging;
    std::vector<Bytes> buffers;  // what local readers see: the latest one
    uint32_t latest = 0;
    Bytes latest_snapshot;  // the latest buffer as published
    int target = -1;  // the buffer frames go to; -1: the staging copy
    std::unique_ptr<ReplicaReceiver> rx;
    std::unique_ptr<VersionPublisher> publisher;
    std::vector<Packet> inbox;
    uint64_t last_ack_ns = 0;
    int publish_round = -1;  // a deferred publish happens then
    bool any_complete = false;
    uint64_t last_complete = 0;
    uint64_t completions = 0;
  };
  struct SentTransfer {
    Transfer t;
    wire::DataFrameWriter::Plan plan;
  };

  bool Coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  size_t Below(size_t n) { return static_cast<size_t>(rng_() % n); }

  std::string Describe(const Replica& r) const {
    if (!r.subscribed) return "host " + std::to_string(r.host) + " not subscribed";
    return "host " + std::to_string(r.host) + ": complete " +
           std::to_string(r.rx->complete_version()) + (r.rx->has_base() ? "" : " (no base)") +
           ", assembling " +
           (r.rx->assembling() ? std::to_string(r.rx->assembling_version()) : std::string("-")) +
           ", sender's acked " + std::to_string(sender_.acked(r.host)) + ", completions " +
           std::to_string(r.completions);
  }

  // Reader buffers per replica: 2 (the library's default) to 4, by seed.
  uint32_t Buffers() const { return 2 + static_cast<uint32_t>(p_.seed % 3); }

  void StartReplica(Replica& r) {
    r.staging.assign(rounded_, 0xee);  // junk: a line never sent shows up
    r.buffers.assign(Buffers(), Bytes(rounded_, 0xdd));
    r.latest = 0;
    r.latest_snapshot.clear();
    r.rx = std::make_unique<ReplicaReceiver>(p_.area_bytes, r.staging.data());
    r.publisher = std::make_unique<VersionPublisher>(p_.area_bytes, Buffers());
    r.target = -1;
    Aim(r);
    r.subscribed = true;
    r.last_ack_ns = 0;
    r.publish_round = -1;
    r.any_complete = false;
    r.last_complete = 0;
    sender_.Subscribe(r.host);
  }

  // The reader host's daemon restarts: a fresh replica; the writer's daemon
  // sees the new incarnation and forgets the host's subscription, then the
  // host subscribes again. Acks of the old incarnation are gone with it.
  void Restart(Replica& r) {
    sender_.Unsubscribe(r.host);
    std::erase_if(acks_, [&](const AckMsg& a) { return a.host == r.host; });
    StartReplica(r);
  }

  // Every replica holds the final version, and the sender knows it.
  bool Converged() const {
    if (sender_.version() != wv_ || sender_.AwaitingAcks(now_, kRtoNs)) return false;
    for (const auto& r : replicas_) {
      if (!r->subscribed || !r->rx->has_base() || r->rx->complete_version() != wv_ ||
          r->rx->publish_pending() || sender_.acked(r->host) != wv_) {
        return false;
      }
    }
    return true;
  }

  void Round(bool writing) {
    ++round_;
    now_ += kTickNs;
    for (size_t i = 0; i < replicas_.size(); ++i) {
      Replica& r = *replicas_[i];
      if (!r.subscribed && static_cast<int>(i) == p_.hosts - 1 && round_ >= p_.late_subscriber_round) {
        StartReplica(r);
      }
      if (i == 1 && round_ == p_.restart_round) Restart(r);
    }
    if (p_.cut_round >= 0 && round_ == p_.cut_round + p_.down_after_rounds &&
        p_.down_after_rounds < p_.cut_rounds) {
      sender_.SetHostUp(kCutHost, false);
      cut_host_down_ = true;
    }
    if (p_.cut_round >= 0 && round_ == p_.cut_round + p_.cut_rounds) {
      sender_.SetHostUp(kCutHost, true);  // heard from again
      cut_host_down_ = false;
    }
    if (writing && (p_.write_at ? p_.write_at(round_) : Coin(0.7))) WriterStep();
    ExportStep();
    for (auto& r : replicas_) {
      if (r->subscribed) Deliver(*r);
    }
    for (auto& r : replicas_) {
      if (r->subscribed) ReplicaTurn(*r);
    }
    ProcessAcks();
  }

  // The writer changes some lines and publishes one version.
  void WriterStep() {
    static constexpr double kFractions[] = {0.0005, 0.002, 0.01, 0.05, 0.3};
    const double f = kFractions[Below(std::size(kFractions))];
    const size_t n = std::max<size_t>(1, static_cast<size_t>(f * static_cast<double>(lines_)));
    auto write_line = [&](size_t line) {
      const size_t begin = line * kLineBytes;
      const size_t end = std::min(begin + kLineBytes, p_.area_bytes);
      for (size_t i = begin; i < end; ++i) writer_[i] = static_cast<uint8_t>(rng_());
      dirty_.AddLines(line, 1);
    };
    if (Coin(0.5)) {
      for (size_t k = 0; k < n; ++k) write_line(Below(lines_));
    } else {
      const size_t first = Below(lines_);
      for (size_t k = 0; k < n && first + k < lines_; ++k) write_line(first + k);
    }
    if (Coin(0.05)) write_line(lines_ - 1);  // the (partial) last line
    ++wv_;
  }

  wire::Header DataHeader(const Transfer& t, uint16_t dest) const {
    wire::Header h{};
    h.source_host = kWriterHost;
    h.dest_host = dest;
    h.area_index = 3;
    h.area_generation = 1;
    h.version = t.version;
    h.base_version = t.base;
    h.flags = t.full ? wire::kFlagFull : 0;
    h.transfer_id = t.transfer_id;
    return h;
  }

  // A delta must carry every line that differs between its base and its version.
  void CheckCovers(const Transfer& t) {
    EXPECT_EQ(t.version, sender_.version());
    if (t.full) {
      EXPECT_EQ(t.lines->CountLines(), lines_);
      return;
    }
    auto base = history_.find(t.base);
    if (base == history_.end()) return;  // older than what we keep
    for (size_t line = 0; line < lines_; ++line) {
      if (std::memcmp(base->second.data() + line * kLineBytes, shadow_.data() + line * kLineBytes,
                      kLineBytes) != 0 &&
          !t.lines->Test(line)) {
        ADD_FAILURE() << "transfer " << t.base << " -> " << t.version << " misses line " << line
                      << " (seed " << p_.seed << ")";
        ++failures_;
        return;
      }
    }
  }

  // dsmd's export turn: collect when no receiver may still ask for frames of
  // the shadow, then send whatever is due.
  void ExportStep() {
    if (!sender_.AwaitingAcks(now_, kRtoNs) && (!collected_once_ || wv_ > sender_.version())) {
      LineSet changed(p_.area_bytes);
      if (collected_once_) {
        changed.Merge(dirty_);
      } else {
        changed.AddAll();
      }
      sender_.Collected(wv_, changed);
      if (cut_host_down_) ++collects_while_down_;  // it holds nothing back
      shadow_ = writer_;
      history_[wv_] = shadow_;
      while (history_.size() > kHistory) history_.erase(history_.begin());
      dirty_.Clear();
      sent_.clear();
      collected_once_ = true;
      ++collects_;
    }
    Transfer t;
    for (int guard = 0; guard < 2 * p_.hosts && sender_.NextTransfer(now_, kRtoNs, &t); ++guard) {
      ++transfers_;
      CheckCovers(t);
      if (cut_host_down_ && std::find(t.hosts.begin(), t.hosts.end(), kCutHost) != t.hosts.end()) {
        ADD_FAILURE() << "a transfer to host " << kCutHost << " while it is down (round " << round_ << ")";
        ++failures_;
      }
      const bool group = t.hosts.size() > 1;
      const wire::DataFrameWriter writer(
          p_.frame_bytes, DataHeader(t, group ? wire::kAllHosts : t.hosts.front()));
      wire::DataFrameWriter::Plan plan = writer.MakePlan(*t.lines);
      EXPECT_GT(plan.frames(), 0u) << "an empty transfer can never be acknowledged";
      VectorSink sink;
      EXPECT_EQ(writer.WritePlanned(plan, shadow_.data(), 0, plan.frames(), sink), plan.frames());
      sender_.Sent(t, now_);
      // Multicast reaches every host (the others drop what they cannot use).
      const bool to_all = group || Coin(p_.multicast_to_all);
      for (auto& r : replicas_) {
        if (!r->subscribed) continue;
        if (!to_all && std::find(t.hosts.begin(), t.hosts.end(), r->host) == t.hosts.end()) continue;
        for (const Bytes& f : sink.frames) Route(*r, f);
      }
      const uint32_t id = t.transfer_id;
      sent_[id] = SentTransfer{std::move(t), std::move(plan)};
      t = Transfer{};
    }
  }

  bool Cut(uint16_t host) const {
    return host == kCutHost && p_.cut_round >= 0 && round_ >= p_.cut_round &&
           round_ < p_.cut_round + p_.cut_rounds;
  }

  void Route(Replica& r, const Bytes& frame) {
    if (Cut(r.host)) return;
    if (Coin(p_.drop)) return;
    if (r.host == 10 + p_.hosts - 1 && Coin(p_.slow_host_drop)) return;
    if (p_.lose_frame) {
      wire::Frame f{};
      if (wire::Decode(frame, &f) == DropReason::kNone && p_.lose_frame(r.host, f.header, round_)) {
        return;
      }
    }
    const int copies = Coin(p_.duplicate) ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      Packet pkt{frame, false, round_};
      if (Coin(p_.corrupt)) {
        pkt.bytes[Below(pkt.bytes.size())] ^= static_cast<uint8_t>(1 + Below(255));
        pkt.corrupt = true;
      }
      if (Coin(p_.late)) pkt.due_round = round_ + 1 + static_cast<int>(Below(3));
      r.inbox.push_back(std::move(pkt));
    }
  }

  void Deliver(Replica& r) {
    std::vector<Packet> due;
    std::vector<Packet> later;
    for (Packet& pkt : r.inbox) (pkt.due_round <= round_ ? due : later).push_back(std::move(pkt));
    r.inbox = std::move(later);
    // Reordering within windows of 8 frames.
    for (size_t i = 0; i < due.size(); i += 8) {
      std::shuffle(due.begin() + static_cast<std::ptrdiff_t>(i),
                   due.begin() + static_cast<std::ptrdiff_t>(std::min(i + 8, due.size())), rng_);
    }
    for (const Packet& pkt : due) {
      wire::Frame f{};
      const DropReason d = wire::Decode(pkt.bytes, &f);
      if (pkt.corrupt) {
        EXPECT_NE(d, DropReason::kNone) << "a corrupted frame passed Decode";
        ++corrupt_rejected_;
        continue;
      }
      ASSERT_EQ(d, DropReason::kNone);
      ++frames_delivered_;
      if (r.target < 0 && r.rx->changed().Empty()) Aim(r);
      const ReplicaReceiver::Result res = r.rx->OnData(f, now_);
      ++stats_[static_cast<size_t>(res.drop)];
      if (res.completed) {
        SendAck(r);  // first, as dsmd: the sender may move on while we copy locally
        Completed(r);
      } else if (res.ack_now && now_ - r.last_ack_ns >= kAckMinGapNs) {
        SendAck(r);  // frames we cannot use: one ack per gap is enough
      }
    }
  }

  void Completed(Replica& r) {
    const uint64_t v = r.rx->complete_version();
    ++r.completions;
    if (r.any_complete && v <= r.last_complete) {
      ADD_FAILURE() << "host " << r.host << " completed " << v << " after " << r.last_complete;
      ++failures_;
    }
    r.any_complete = true;
    r.last_complete = v;
    auto it = history_.find(v);
    if (it == history_.end()) {
      ADD_FAILURE() << "host " << r.host << " completed version " << v
                    << ", which was never collected or is long gone (seed " << p_.seed << ")";
      ++failures_;
    }
    if (r.target < 0 && PickTarget(r) < 0) {
      // Local readers hold every spare buffer: retried in a later turn.
      r.publish_round = round_ + 1 + static_cast<int>(Below(3));
    } else {
      Publish(r);
    }
  }

  // A buffer for the next version as dsmd picks it (PickTargetBuffer), with
  // local readers pinning each buffer at random; -1: none free.
  int PickTarget(const Replica& r) {
    uint32_t pinned = 0;
    for (uint32_t b = 0; b < r.buffers.size(); ++b) {
      if (Coin(p_.pin)) pinned |= 1u << b;
    }
    return PickTargetBuffer(static_cast<uint32_t>(r.buffers.size()), r.latest, pinned);
  }

  // dsmd's AimReplica: between versions, frames go to a spare buffer, or to
  // the staging copy while local readers pin every spare; a spare is caught up
  // with the latest version at once (VersionPublisher::CatchUp).
  void Aim(Replica& r) {
    const int b = PickTarget(r);
    uint8_t* dst = b >= 0 ? r.buffers[static_cast<size_t>(b)].data() : r.staging.data();
    if (!r.rx->SetTarget(dst)) return;
    r.target = b;
    if (b >= 0) r.publisher->CatchUp(static_cast<uint32_t>(b), r.buffers[r.latest].data(), dst);
  }

  // What local readers may hold must not change under them: the latest buffer
  // stays as published until the next publish. And every buffer differs from
  // the latest only in lines its publisher still lists as pending for it.
  void CheckBuffers(const Replica& r, const char* when) {
    if (!r.latest_snapshot.empty() &&
        std::memcmp(r.buffers[r.latest].data(), r.latest_snapshot.data(), rounded_) != 0) {
      ADD_FAILURE() << "host " << r.host << ": the latest buffer changed between publishes (" << when
                    << ", seed " << p_.seed << ", round " << round_ << ")";
      ++failures_;
    }
  }
  void CheckPending(const Replica& r) {
    const Bytes& latest = r.buffers[r.latest];
    for (uint32_t b = 0; b < r.buffers.size(); ++b) {
      for (size_t line = 0; line < lines_; ++line) {
        if (std::memcmp(r.buffers[b].data() + line * kLineBytes, latest.data() + line * kLineBytes,
                        kLineBytes) != 0 &&
            !r.publisher->pending(b).Test(line)) {
          ADD_FAILURE() << "host " << r.host << ": buffer " << b << " differs from the latest at line "
                        << line << ", which is not pending for it (seed " << p_.seed << ")";
          ++failures_;
          return;
        }
      }
    }
  }

  // dsmd's PublishReplica: lines staged since the last publish are copied over
  // (when they went to the staging copy), what the target missed comes from
  // the latest buffer (VersionPublisher::PublishInPlace); the target must then
  // be the version, byte for byte.
  void Publish(Replica& r) {
    const LineSet& written = r.rx->changed();
    CheckBuffers(r, "before a publish");
    int picked = r.target;
    if (picked < 0) {
      // Deferred until a spare is free (Completed/ReplicaTurn retry).
      while ((picked = PickTarget(r)) < 0) {
      }
    }
    const uint32_t t = static_cast<uint32_t>(picked);
    if (r.target < 0) {
      written.ForEachPage([&](size_t page, uint64_t mask) {
        CopyPageLines(page, mask, r.staging.data(), r.buffers[t].data());
      });
    }
    r.publisher->PublishInPlace(written, t, r.buffers[r.latest].data(), r.buffers[t].data());
    r.latest = t;
    const uint64_t v = r.rx->complete_version();
    auto it = history_.find(v);
    if (it != history_.end() && std::memcmp(r.buffers[t].data(), it->second.data(), rounded_) != 0) {
      size_t line = 0;
      while (std::memcmp(r.buffers[t].data() + line * kLineBytes,
                         it->second.data() + line * kLineBytes, kLineBytes) == 0) {
        ++line;
      }
      ADD_FAILURE() << "host " << r.host << " published version " << v << " ("
                    << (r.target < 0 ? "staged" : "in place")
                    << ") but its readers' copy differs from the writer's at line " << line
                    << " (seed " << p_.seed << ", round " << round_ << ")";
      ++failures_;
    }
    r.rx->Published();
    r.rx->SetTarget(r.staging.data());  // as dsmd: the next frame aims
    r.target = -1;
    r.latest_snapshot = r.buffers[r.latest];
    CheckPending(r);
  }

  void SendAck(Replica& r) {
    AckMsg a;
    a.host = r.host;
    a.complete = r.rx->complete_version();
    a.has_base = r.rx->has_base();
    a.assembling_version = r.rx->assembling_version();
    a.transfer = r.rx->assembling_transfer();
    a.missing.resize(wire::kMaxMissingRanges);
    a.missing.resize(r.rx->MissingRanges(a.missing.data(), a.missing.size()));
    a.due_round = Coin(0.3) ? round_ + 1 : round_;
    r.last_ack_ns = now_;
    if (Coin(p_.ack_drop) || Cut(r.host)) return;
    acks_.push_back(std::move(a));
  }

  void ReplicaTurn(Replica& r) {
    if (r.publish_round >= 0) {
      if (r.publish_round <= round_) {
        r.publish_round = -1;
        Publish(r);
      }
      return;
    }
    if (r.target < 0 && !r.rx->assembling()) Aim(r);
    if (r.rx->assembling() && now_ - r.rx->last_frame_ns() > kNackAfterNs &&
        now_ - r.last_ack_ns > kNackAfterNs) {
      SendAck(r);
    }
  }

  // dsmd's OnAck: record the receiver's state, resend what it misses of a
  // transfer of the current shadow.
  void ProcessAcks() {
    std::vector<AckMsg> due;
    std::vector<AckMsg> later;
    for (AckMsg& a : acks_) (a.due_round <= round_ ? due : later).push_back(std::move(a));
    acks_ = std::move(later);
    std::shuffle(due.begin(), due.end(), rng_);
    for (const AckMsg& a : due) {
      if (!sender_.subscribed(a.host)) continue;
      if (a.has_base) {
        sender_.OnAck(a.host, a.complete, now_);
      } else {
        sender_.OnAckNothing(a.host);
      }
      auto it = sent_.find(a.transfer);
      if (a.missing.empty()) continue;
      if (it == sent_.end() || a.assembling_version != it->second.t.version) {
        // No longer here to resend from (as in dsmd): it comes with the next transfer.
        sender_.OnLostTransfer(a.host, a.transfer);
        continue;
      }
      const wire::DataFrameWriter writer(p_.frame_bytes, DataHeader(it->second.t, a.host));
      VectorSink sink;
      for (const wire::SeqRange& range : a.missing) {
        resent_frames_ += writer.WritePlanned(it->second.plan, shadow_.data(), range.first, range.count, sink);
      }
      Replica& r = *replicas_[a.host - 10u];
      for (const Bytes& f : sink.frames) Route(r, f);
    }
  }

  const Params p_;
  const size_t lines_;
  const size_t rounded_;
  std::mt19937_64 rng_;
  int round_ = 0;
  uint64_t now_ = 1'000'000'000;

  Bytes writer_;
  uint64_t wv_ = 0;
  LineSet dirty_;  // lines written since the last collect

  ReplicaSender sender_;
  Bytes shadow_;
  bool collected_once_ = false;
  std::map<uint64_t, Bytes> history_;  // collected version -> content
  std::map<uint32_t, SentTransfer> sent_;

  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<AckMsg> acks_;

  uint64_t collects_ = 0, transfers_ = 0, frames_delivered_ = 0, resent_frames_ = 0;
  uint64_t corrupt_rejected_ = 0;
  bool cut_host_down_ = false;
  uint64_t collects_while_down_ = 0;
  int failures_ = 0;
  std::vector<uint64_t> stats_ = std::vector<uint64_t>(static_cast<size_t>(DropReason::kCount), 0);
};

void RunModel(const Params& p) {
  Model m(p);
  const bool converged = m.Run();
  SCOPED_TRACE(m.Summary());
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_TRUE(converged) << "replicas did not converge after the writer stopped";
  m.ExpectConvergedExactly();
  m.ExpectTraffic();
}

TEST(ReplicationModelTest, SmallAreaManySeeds) {
  for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p;
    p.seed = seed;
    RunModel(p);
    if (HasFailure()) return;
  }
}

TEST(ReplicationModelTest, SmallAreaWithAPartialLastLineAndTinyFrames) {
  for (uint64_t seed : {11, 12}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p;
    p.seed = seed;
    p.area_bytes = 64 * 1024 - 24;
    p.frame_bytes = wire::DataFrameWriter::kMinFrameBytes + 3 * kLineBytes;  // 4 lines
    p.write_rounds = 100;
    RunModel(p);
    if (HasFailure()) return;
  }
}

TEST(ReplicationModelTest, LargeAreaWithAPartialLastLine) {
  for (uint64_t seed : {21, 22}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p;
    p.seed = seed;
    p.area_bytes = (size_t{1} << 20) - 40;
    p.frame_bytes = 8972;
    p.write_rounds = 120;
    RunModel(p);
    if (HasFailure()) return;
  }
}

TEST(ReplicationModelTest, LateSubscriberAndRestartedReader) {
  for (uint64_t seed : {31, 32, 33}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p;
    p.seed = seed;
    p.late_subscriber_round = 40;
    p.restart_round = 80;
    RunModel(p);
    if (HasFailure()) return;
  }
}

TEST(ReplicationModelTest, ASlowHostFallsBehindAndCatchesUp) {
  for (uint64_t seed : {71, 72, 73}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p;
    p.seed = seed;
    p.slow_host_drop = 0.3;
    p.multicast_to_all = 0.5;
    RunModel(p);
    if (HasFailure()) return;
  }
}

TEST(ReplicationModelTest, HeavyLoss) {
  for (uint64_t seed : {41, 42}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p;
    p.seed = seed;
    p.drop = 0.2;
    p.ack_drop = 0.2;
    p.late = 0.15;
    p.duplicate = 0.1;
    p.settle_rounds = 3000;
    RunModel(p);
    if (HasFailure()) return;
  }
}

TEST(ReplicationModelTest, EveryTransferReachesEveryHost) {
  // Multicast of every transfer: hosts see transfers meant for others (other
  // bases, other ids) and must use or refuse them without harm.
  for (uint64_t seed : {61, 62}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p;
    p.seed = seed;
    p.multicast_to_all = 1.0;
    p.late_subscriber_round = 50;
    p.slow_host_drop = 0.3;
    RunModel(p);
    if (HasFailure()) return;
  }
}

// Regression: a NACK from a host still assembling its first (version 0)
// transfer carries kFlagFull ("I hold nothing yet"). It used to be taken as an
// ack of version 0; if the resent frames were lost too and the writer published,
// the host then got deltas from a base it never had, forever.
TEST(ReplicationModelTest, NackOfAVersionZeroTransferIsNotAnAckOfVersionZero) {
  Params p;
  p.seed = 7;
  p.hosts = 1;
  p.first_version = 0;
  p.drop = p.duplicate = p.late = p.corrupt = p.ack_drop = p.pin = 0;
  p.multicast_to_all = 0;
  p.write_rounds = 12;
  p.settle_rounds = 500;
  // Frame 5 of the version-0 transfer is lost, and so is its resend.
  p.lose_frame = [](uint16_t, const wire::Header& h, int round) {
    return h.version == 0 && h.seq == 5 && round <= 10;
  };
  // The writer publishes version 1 after the NACK.
  p.write_at = [](int round) { return round == 7; };
  Model m(p);
  const bool converged = m.Run();
  SCOPED_TRACE(m.Summary());
  ASSERT_TRUE(converged) << "the replica never completes a first version";
  m.ExpectConvergedExactly();
}

// A host cut off long enough to be marked down is sent nothing meanwhile and
// holds nothing back (the writer's versions keep being collected for the
// others); once back it gets what it missed and ends equal.
TEST(ReplicationModelTest, AHostCutOffIsSentNothingWhileDownAndCatchesUpOnceBack) {
  for (uint64_t seed : {81, 82, 83}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p;
    p.seed = seed;
    p.cut_round = 40;
    p.cut_rounds = 120;
    Model m(p);
    const bool converged = m.Run();
    SCOPED_TRACE(m.Summary());
    ASSERT_FALSE(::testing::Test::HasFailure());
    ASSERT_TRUE(converged) << "replicas did not converge after the cut healed";
    m.ExpectConvergedExactly();
    EXPECT_GT(m.collects_while_down(), 3u) << "the down host held back the others";
  }
}

// The same, found by the randomized model when the area starts at version 0
// (seeds 111, 140 and 158 used to leave one host without a first version).
TEST(ReplicationModelTest, RandomRunsFromVersionZero) {
  Params p;
  p.seed = 111;
  p.first_version = 0;
  RunModel(p);
}

}  // namespace
}  // namespace dsm

// ---- soak (suite 'soak'): many seeds of every kind of run --------------------
//   DSM_SOAK_SEEDS=N (default 100 per kind) DSM_SOAK_SEED_BASE=B (default 1000)
// Only what must hold for every seed is checked: the replicas converge to the
// writer's last version, byte for byte, and no transfer misses a changed line
// (the traffic checks of the tests above are for their own seeds).

namespace dsm {
namespace {

using ::dsm::testing::EnvOr;

TEST(ReplicationModelSoak, EveryKindOfRunConvergesExactly) {
  const uint64_t seeds = EnvOr("DSM_SOAK_SEEDS", 100);
  const uint64_t base = EnvOr("DSM_SOAK_SEED_BASE", 1000);
  struct Kind {
    const char* name;
    std::function<void(Params&, uint64_t seed)> set;
  };
  const Kind kinds[] = {
      {"default faults", [](Params&, uint64_t) {}},
      {"heavy loss",
       [](Params& p, uint64_t) {
         p.drop = 0.2;
         p.ack_drop = 0.2;
         p.late = 0.15;
         p.duplicate = 0.1;
         p.settle_rounds = 3000;
       }},
      {"slow host",
       [](Params& p, uint64_t) {
         p.slow_host_drop = 0.3;
         p.multicast_to_all = 0.5;
       }},
      {"late subscriber", [](Params& p, uint64_t s) { p.late_subscriber_round = 20 + static_cast<int>(s % 150); }},
      {"restart", [](Params& p, uint64_t s) { p.restart_round = 10 + static_cast<int>(s % 180); }},
      {"cut off",
       [](Params& p, uint64_t s) {
         p.cut_round = 10 + static_cast<int>(s % 100);
         p.cut_rounds = 70 + static_cast<int>(s % 150);
       }},
      {"from version 0, jumbo frames",
       [](Params& p, uint64_t s) {
         p.first_version = 0;
         p.frame_bytes = s % 2 == 0 ? 8972 : 1472;
         p.area_bytes = 256 * 1024 + 64 * (s % 7) + s % 64;  // a partial last line, some seeds
       }},
  };
  for (const Kind& kind : kinds) {
    for (uint64_t seed = base; seed < base + seeds; ++seed) {
      Params p;
      p.seed = seed;
      kind.set(p, seed);
      Model m(p);
      const bool converged = m.Run();
      if (converged && !::testing::Test::HasFailure()) m.ExpectConvergedExactly();
      if (!converged || ::testing::Test::HasFailure()) {
        ADD_FAILURE() << kind.name << (converged ? "" : ": did not converge") << "; " << m.Summary();
        return;  // the first failing seed says it all
      }
    }
  }
}

}  // namespace
}  // namespace dsm
