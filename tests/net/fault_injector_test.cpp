// WithFaults over a fake inner transport: each fault's rate over many frames,
// what the receiver would observe, and determinism per seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "net/transport.h"

namespace dsm::net {
namespace {

struct SentFrame {
  Destination dest;
  std::vector<uint8_t> payload;
};

// Records what is committed; Reserve fails when `full` is set.
class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(std::vector<SentFrame>* sent) : sent_(sent) {}
  size_t max_payload_bytes() const override { return 1472; }
  uint8_t* Reserve(Destination dest) override {
    if (full) {
      ++stats_.tx_dropped;
      return nullptr;
    }
    dest_ = dest;
    return buffer_;
  }
  void Commit(size_t bytes) override {
    if (bytes > max_payload_bytes()) {
      ++stats_.tx_dropped;
      return;
    }
    sent_->push_back({dest_, std::vector<uint8_t>(buffer_, buffer_ + bytes)});
    ++stats_.tx_frames;
  }
  // Tails are passed by reference when a hold is given: recorded as such.
  struct Hold final : TailHold {
    size_t frames_in_use() const override { return 0; }
  };
  std::unique_ptr<TailHold> NewTailHold() override { return std::make_unique<Hold>(); }
  void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                      TailHold* hold) override {
    if (hold == nullptr) return Transport::CommitWithTail(reserved, head_bytes, tail, hold);
    sent_->push_back({dest_, std::vector<uint8_t>(buffer_, buffer_ + head_bytes)});
    tails.push_back(tail.data());
    ++stats_.tx_frames;
  }
  size_t Flush() override { return 0; }
  size_t Poll(size_t, const RxFn&) override { return 0; }
  void WaitForFrames(uint32_t) override {}
  TransportStats stats() const override { return stats_; }

  bool full = false;
  std::vector<const uint8_t*> tails;  // of frames committed with a hold

 private:
  std::vector<SentFrame>* sent_;
  Destination dest_;
  uint8_t buffer_[1472];
  TransportStats stats_;
};

constexpr size_t kPayloadBytes = 64;

// Frame i carries its index and a pattern derived from it.
void Fill(uint8_t* p, uint32_t i) {
  std::memcpy(p, &i, 4);
  const uint32_t fold = i ^ (i >> 8) ^ (i >> 16) ^ (i >> 24);  // any flipped index bit shows
  for (size_t k = 4; k < kPayloadBytes; ++k) p[k] = static_cast<uint8_t>(fold * 31 + k);
}
bool Intact(const std::vector<uint8_t>& p, uint32_t* index) {
  if (p.size() != kPayloadBytes) return false;
  std::memcpy(index, p.data(), 4);
  uint8_t expect[kPayloadBytes];
  Fill(expect, *index);
  return std::memcmp(expect, p.data(), kPayloadBytes) == 0;
}

std::vector<SentFrame> SendThroughFaults(const FaultConfig& faults, uint32_t frames,
                                         TransportStats* stats) {
  std::vector<SentFrame> sent;
  auto t = WithFaults(std::make_unique<FakeTransport>(&sent), faults);
  for (uint32_t i = 0; i < frames; ++i) {
    uint8_t* p = t->Reserve(Destination::Host(static_cast<uint16_t>(i % 3)));
    EXPECT_NE(p, nullptr);
    Fill(p, i);
    t->Commit(kPayloadBytes);
    if (i % 16 == 15) t->Flush();
  }
  t->Flush();
  *stats = t->stats();
  return sent;
}

// |observed - expected| within 5 standard deviations of a binomial count.
void ExpectRate(uint64_t observed, double p, uint32_t n, const char* what) {
  const double expected = p * n;
  const double sigma = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(static_cast<double>(observed), expected, 5 * sigma + 1) << what;
}

TEST(FaultInjectorTest, NoFaultsPassesEverythingInOrder) {
  TransportStats stats;
  const std::vector<SentFrame> sent = SendThroughFaults({}, 1000, &stats);
  ASSERT_EQ(sent.size(), 1000u);
  for (uint32_t i = 0; i < 1000; ++i) {
    uint32_t index = 0;
    ASSERT_TRUE(Intact(sent[i].payload, &index));
    EXPECT_EQ(index, i);
    EXPECT_EQ(sent[i].dest.host, i % 3);
  }
  EXPECT_EQ(stats.tx_frames, 1000u);
  EXPECT_EQ(stats.faults_dropped + stats.faults_duplicated + stats.faults_reordered +
                stats.faults_corrupted,
            0u);
}

TEST(FaultInjectorTest, RatesAndObservedEffects) {
  constexpr uint32_t kFrames = 200'000;
  const FaultConfig faults{
      .drop = 0.10, .duplicate = 0.05, .reorder = 0.04, .corrupt = 0.03, .seed = 42};
  TransportStats stats;
  const std::vector<SentFrame> sent = SendThroughFaults(faults, kFrames, &stats);
  ExpectRate(stats.faults_dropped, 0.10, kFrames, "drop");
  ExpectRate(stats.faults_duplicated, 0.05, kFrames, "duplicate");
  ExpectRate(stats.faults_reordered, 0.04, kFrames, "reorder");
  ExpectRate(stats.faults_corrupted, 0.03, kFrames, "corrupt");

  // What a receiver sees agrees with the counters.
  std::vector<uint32_t> seen(kFrames, 0);
  uint64_t corrupted = 0;
  for (const SentFrame& f : sent) {
    uint32_t index = 0;
    if (!Intact(f.payload, &index)) {
      ++corrupted;
      continue;
    }
    ASSERT_LT(index, kFrames);
    ++seen[index];
  }
  EXPECT_EQ(corrupted, stats.faults_corrupted);
  uint64_t missing = 0, twice = 0;
  for (uint32_t c : seen) {
    if (c == 0) ++missing;
    if (c == 2) ++twice;
    EXPECT_LE(c, 2u);
  }
  // Frames still held back when the run ends are missing too (a few at most).
  EXPECT_GE(missing, stats.faults_dropped + stats.faults_corrupted);
  EXPECT_LE(missing, stats.faults_dropped + stats.faults_corrupted + 3);
  EXPECT_EQ(twice, stats.faults_duplicated);
  EXPECT_EQ(stats.tx_frames, sent.size());
}

TEST(FaultInjectorTest, ReorderedFramesArriveAfterALaterOne) {
  constexpr uint32_t kFrames = 100'000;
  const FaultConfig faults{
      .drop = 0.05, .duplicate = 0.05, .reorder = 0.1, .corrupt = 0, .seed = 5};
  TransportStats stats;
  const std::vector<SentFrame> sent = SendThroughFaults(faults, kFrames, &stats);
  ExpectRate(stats.faults_reordered, 0.1, kFrames, "reorder");
  uint64_t late = 0;
  uint32_t highest = 0;
  for (const SentFrame& f : sent) {
    uint32_t index = 0;
    ASSERT_TRUE(Intact(f.payload, &index));
    if (index < highest) ++late;
    highest = std::max(highest, index);
  }
  EXPECT_EQ(late, stats.faults_reordered);
}

TEST(FaultInjectorTest, DeterministicPerSeed) {
  const FaultConfig a{.drop = 0.2, .duplicate = 0.1, .reorder = 0.1, .corrupt = 0.1, .seed = 7};
  FaultConfig b = a;
  b.seed = 8;
  TransportStats s1, s2, s3;
  const std::vector<SentFrame> r1 = SendThroughFaults(a, 5000, &s1);
  const std::vector<SentFrame> r2 = SendThroughFaults(a, 5000, &s2);
  const std::vector<SentFrame> r3 = SendThroughFaults(b, 5000, &s3);
  ASSERT_EQ(r1.size(), r2.size());
  for (size_t i = 0; i < r1.size(); ++i) ASSERT_EQ(r1[i].payload, r2[i].payload) << i;
  EXPECT_EQ(s1.faults_dropped, s2.faults_dropped);
  bool differ = r1.size() != r3.size();
  for (size_t i = 0; !differ && i < r1.size(); ++i) differ = r1[i].payload != r3[i].payload;
  EXPECT_TRUE(differ) << "seeds 7 and 8 gave identical fault sequences";
}

TEST(FaultInjectorTest, ProbabilitiesAboveOneAreScaled) {
  TransportStats stats;
  const std::vector<SentFrame> sent = SendThroughFaults(
      {.drop = 1.0, .duplicate = 1.0, .reorder = 0, .corrupt = 0, .seed = 3}, 20000, &stats);
  ExpectRate(stats.faults_dropped, 0.5, 20000, "drop");
  ExpectRate(stats.faults_duplicated, 0.5, 20000, "duplicate");
  EXPECT_EQ(sent.size(), 2 * stats.faults_duplicated);
}

// With drops only, frames go straight to the inner transport: written in
// its buffer, tails read in place where it offers a hold. The loss a test
// injects then costs no copy of its own.
TEST(FaultInjectorTest, DropsAlonePassFramesAndTailsThroughUncopied) {
  std::vector<SentFrame> sent;
  auto fake = std::make_unique<FakeTransport>(&sent);
  FakeTransport* raw = fake.get();
  FaultConfig faults;
  faults.drop = 0.3;
  auto t = WithFaults(std::move(fake), faults);
  std::unique_ptr<TailHold> hold = t->NewTailHold();
  ASSERT_NE(hold, nullptr) << "the inner transport's hold";
  static const uint8_t kTail[256] = {7};
  constexpr uint32_t kFrames = 4000;
  for (uint32_t i = 0; i < kFrames; ++i) {
    uint8_t* p = t->Reserve(Destination::Host(1));
    ASSERT_NE(p, nullptr);
    Fill(p, i);
    if (i % 2 == 0) {
      t->Commit(kPayloadBytes);
    } else {
      t->CommitWithTail(p, kPayloadBytes, std::span<const uint8_t>(kTail), hold.get());
    }
  }
  const TransportStats stats = t->stats();
  ExpectRate(stats.faults_dropped, 0.3, kFrames, "drop");
  EXPECT_EQ(sent.size() + stats.faults_dropped, kFrames);
  EXPECT_EQ(stats.faults_duplicated + stats.faults_reordered + stats.faults_corrupted, 0u);
  ASSERT_FALSE(raw->tails.empty());
  for (const uint8_t* tail : raw->tails) EXPECT_EQ(tail, kTail) << "the tail was copied";
  uint32_t last = 0;
  for (const SentFrame& f : sent) {
    uint32_t index = 0;
    ASSERT_TRUE(Intact(f.payload, &index));
    EXPECT_GE(index, last) << "order kept";
    last = index;
  }
}

TEST(FaultInjectorTest, InnerFailuresAndOversizedPayloadsAreCountedByTheInner) {
  std::vector<SentFrame> sent;
  auto fake = std::make_unique<FakeTransport>(&sent);
  FakeTransport* raw = fake.get();
  auto t = WithFaults(std::move(fake), {});
  EXPECT_EQ(t->max_payload_bytes(), 1472u);
  t->Reserve(Destination::Group(5));
  t->Commit(1473);
  EXPECT_EQ(t->stats().tx_dropped, 1u);
  raw->full = true;
  std::memset(t->Reserve(Destination::Host(1)), 0, 10);  // the decorator's buffer is always there
  t->Commit(10);
  EXPECT_EQ(t->stats().tx_dropped, 2u);
  raw->full = false;
  t->Commit(10);  // a Commit without Reserve sends nothing
  EXPECT_TRUE(sent.empty());
  t->Reserve(Destination::Group(5));
  t->Commit(0);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].dest.multicast);
  EXPECT_EQ(sent[0].dest.group, 5);
}

}  // namespace
}  // namespace dsm::net
