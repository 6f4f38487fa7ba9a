// In-place versions of a replica (docs/region-layout.md): a reader process
// that reads nothing yields its pin, dsmd takes the latest buffer only when
// every pin on it is yielded, writes the next version there and gives the
// pins back; a reader taking its pin back waits for that, or moves to a
// buffer holding an older exact version if the write takes too long. The
// reader's and dsmd's halves run here on one control block, in threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "libdsm/contract/clock.h"
#include "libdsm/contract/publish_protocol.h"

namespace dsm {
namespace {

constexpr uint32_t kBuffers = 2;
constexpr size_t kWords = 512;  // each buffer: every word holds its version

class InPlaceProtocolTest : public ::testing::Test {
 protected:
  InPlaceProtocolTest() : area_(std::make_unique<AreaControl>()), buffers_(kBuffers) {
    area_->buffer_count = kBuffers;
    area_->is_replica = 1;
    for (auto& p : area_->reader_pin) p.store(kNoPins);
    for (auto& b : buffers_) b = std::make_unique<std::atomic<uint64_t>[]>(kWords);
    // Version 1 in buffer 0 (latest), version 0... nothing exact in buffer 1 yet.
    Write(0, 1);
    CompletePublish(*area_, 0, 1, 1, 0);
  }

  void Write(uint32_t buffer, uint64_t version) {
    for (size_t i = 0; i < kWords; ++i)
      buffers_[buffer][i].store(version, std::memory_order_relaxed);
  }
  // Whether `buffer` holds exactly `version` in every word.
  bool Holds(uint32_t buffer, uint64_t version) const {
    for (size_t i = 0; i < kWords; ++i) {
      if (buffers_[buffer][i].load(std::memory_order_relaxed) != version) return false;
    }
    return true;
  }
  // dsmd publishing `version` into the spare (as a replica's spare publish).
  bool PublishToSpare(uint64_t version) {
    const int spare = ChoosePublishTarget(*area_);
    if (spare < 0 || !MarkForWriting(*area_, static_cast<uint32_t>(spare))) return false;
    Write(static_cast<uint32_t>(spare), version);
    CompletePublish(*area_, static_cast<uint32_t>(spare), version, version, 0);
    return true;
  }
  // A reader in slot `slot` mapping the latest version.
  LatestVersion Attach(uint32_t slot) {
    LatestVersion l{};
    EXPECT_TRUE(PinLatest(*area_, slot, kNoBuffer, &l));
    SetPin(*area_, slot, l.buffer);
    return l;
  }

  std::unique_ptr<AreaControl> area_;
  std::vector<std::unique_ptr<std::atomic<uint64_t>[]>> buffers_;
};

TEST_F(InPlaceProtocolTest, NothingIsTakenWithoutAnOlderExactBufferToFallBackOn) {
  Attach(0);
  YieldPin(*area_, 0);
  EXPECT_EQ(TakeLatestInPlace(*area_), -1) << "buffer 1 never held a version";
  EXPECT_EQ(area_->in_place_buffer.load(), 0u);
  ASSERT_TRUE(ReclaimPin(*area_, 0, 0));
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(0, kNoBuffer));
}

TEST_F(InPlaceProtocolTest, AYieldedPinIsTakenWrittenInPlaceAndGivenBackWithTheNewVersion) {
  ASSERT_TRUE(PublishToSpare(2));  // buffer 1 latest, buffer 0 holds version 1 exactly
  const LatestVersion l = Attach(0);
  ASSERT_EQ(l.buffer, 1u);
  YieldPin(*area_, 0);
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(1, kNoBuffer) | kPinYielded);
  ASSERT_EQ(TakeLatestInPlace(*area_), 1);
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(1, kNoBuffer) | kPinTaken);
  EXPECT_EQ(area_->buffer_version[1].load(), 0u) << "half written while taken";
  EXPECT_FALSE(ReclaimPin(*area_, 0, 1'000'000)) << "taken back while dsmd writes";
  Write(1, 3);
  EndInPlace(*area_, 1, 3, 3, kWords * 8);
  EXPECT_EQ(UnpackLatest(area_->latest.load()).version, 3u);
  EXPECT_EQ(UnpackLatest(area_->latest.load()).buffer, 1u);
  EXPECT_EQ(area_->in_place_buffer.load(), 0u);
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(1, kNoBuffer) | kPinYielded);
  ASSERT_TRUE(ReclaimPin(*area_, 0, 0));
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(1, kNoBuffer));
  EXPECT_EQ(area_->buffer_version[1].load(), 3u);
  EXPECT_TRUE(Holds(1, 3));
}

TEST_F(InPlaceProtocolTest, AReaderUsingTheLatestBufferKeepsItFromBeingTaken) {
  ASSERT_TRUE(PublishToSpare(2));
  Attach(0);  // awake: not yielded
  Attach(1);
  YieldPin(*area_, 1);
  EXPECT_EQ(TakeLatestInPlace(*area_), -1);
  EXPECT_EQ(area_->in_place_buffer.load(), 0u);
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(1, kNoBuffer));
  EXPECT_EQ(area_->reader_pin[1].load(), PinWord(1, kNoBuffer) | kPinYielded)
      << "a pin taken before the scan found the other reader is given back as it was";
  EXPECT_EQ(area_->buffer_version[1].load(), 2u);
}

TEST_F(InPlaceProtocolTest, ReadersOfAnOlderBufferDoNotKeepTheLatestFromBeingTaken) {
  const LatestVersion old = Attach(0);  // maps buffer 0, version 1
  ASSERT_TRUE(PublishToSpare(2));       // latest: buffer 1
  ASSERT_EQ(old.buffer, 0u);
  // Buffer 0 is pinned (it holds version 1 exactly): the latest may be taken.
  EXPECT_EQ(TakeLatestInPlace(*area_), 1);
  Write(1, 3);
  EndInPlace(*area_, 1, 3, 3, 0);
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(0, kNoBuffer));
  EXPECT_TRUE(Holds(0, 1));
}

TEST_F(InPlaceProtocolTest, PinningTheLatestWaitsForAnInPlaceWriteToEnd) {
  ASSERT_TRUE(PublishToSpare(2));
  ASSERT_EQ(TakeLatestInPlace(*area_), 1);  // no reader at all
  std::atomic<bool> written{false};
  std::thread dsmd([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    Write(1, 3);
    written = true;
    EndInPlace(*area_, 1, 3, 3, 0);
  });
  LatestVersion l{};
  const bool pinned = PinLatest(*area_, 0, kNoBuffer, &l);
  const bool was_written = written.load();
  dsmd.join();
  ASSERT_TRUE(pinned);
  EXPECT_TRUE(was_written) << "pinned the buffer while dsmd wrote it";
  EXPECT_EQ(l.version, 3u);
  EXPECT_TRUE(Holds(l.buffer, 3));
}

TEST_F(InPlaceProtocolTest, AReaderThatCannotWaitMovesToTheOlderExactVersion) {
  ASSERT_TRUE(PublishToSpare(2));  // buffer 1: 2 (latest); buffer 0: 1
  Attach(0);
  YieldPin(*area_, 0);
  ASSERT_EQ(TakeLatestInPlace(*area_), 1);
  Write(1, 0xdead);  // dsmd stops half way
  EXPECT_FALSE(ReclaimPin(*area_, 0, 2'000'000));
  LatestVersion other{};
  ASSERT_TRUE(PinExactOther(*area_, 0, 1, &other));
  EXPECT_EQ(other.buffer, 0u);
  EXPECT_EQ(other.version, 1u);
  EXPECT_TRUE(Holds(0, 1));
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(0, kNoBuffer));
  // dsmd goes on: its end leaves the reader's new pin alone, and the buffer
  // the reader moved to is not a spare it may write.
  Write(1, 3);
  EndInPlace(*area_, 1, 3, 3, 0);
  EXPECT_EQ(area_->reader_pin[0].load(), PinWord(0, kNoBuffer));
  EXPECT_FALSE(MarkForWriting(*area_, 0));
  EXPECT_EQ(area_->buffer_version[0].load(), 1u) << "left as it was";
  EXPECT_FALSE(PublishToSpare(4));
}

TEST_F(InPlaceProtocolTest, MarkingASpareForWritingMakesItInexactUntilPublished) {
  ASSERT_TRUE(PublishToSpare(2));
  EXPECT_EQ(area_->buffer_version[0].load(), 1u);
  ASSERT_TRUE(MarkForWriting(*area_, 0));
  EXPECT_EQ(area_->buffer_version[0].load(), 0u);
  Attach(0);  // latest: buffer 1
  YieldPin(*area_, 0);
  EXPECT_EQ(TakeLatestInPlace(*area_), -1) << "no buffer to fall back on while 0 is written";
}

// Both halves at full speed, with random pauses: a reader that is awake (its
// pin plain) always finds its buffer holding exactly the version it believes,
// before and after it reads it; dsmd writes in place whenever it may, else
// into the spare.
TEST_F(InPlaceProtocolTest, RacingReaderNeverSeesABufferChangeOrAMixedVersion) {
  ASSERT_TRUE(PublishToSpare(2));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> in_place{0}, to_spare{0};
  std::thread dsmd([&] {
    std::mt19937_64 rng(7);
    uint64_t version = 2;
    while (!stop) {
      ++version;
      const int taken = TakeLatestInPlace(*area_);
      if (taken >= 0) {
        for (size_t i = 0; i < kWords; ++i) {
          buffers_[taken][i].store(version, std::memory_order_relaxed);
          if (rng() % 128 == 0) std::this_thread::yield();
        }
        EndInPlace(*area_, static_cast<uint32_t>(taken), version, version, 0);
        ++in_place;
      } else if (PublishToSpare(version)) {
        ++to_spare;
      } else {
        --version;
        std::this_thread::yield();
      }
    }
  });
  std::mt19937_64 rng(11);
  uint64_t checks = 0, mismatches = 0, moved_back = 0;
  uint32_t buffer = kNoBuffer;
  uint64_t version = 0;
  const uint64_t until = MonotonicNs() + 1'500'000'000;
  for (int round = 0; round < 200000 && MonotonicNs() < until; ++round) {
    // Awake: move to the latest, read it twice.
    LatestVersion l{};
    if (PinLatest(*area_, 0, buffer, &l)) {
      SetPin(*area_, 0, l.buffer);
      buffer = l.buffer;
      version = l.version;
    }
    if (buffer != kNoBuffer) {
      ++checks;
      if (!Holds(buffer, version)) ++mismatches;
      if (rng() % 4 == 0) std::this_thread::yield();
      if (!Holds(buffer, version)) ++mismatches;
    }
    // Asleep, then awake again.
    YieldPin(*area_, 0);
    if (rng() % 2 == 0) std::this_thread::yield();
    if (ReclaimPin(*area_, 0, rng() % 8 == 0 ? 0 : 10'000'000)) {
      if (buffer != kNoBuffer) version = area_->buffer_version[buffer].load();
    } else {
      LatestVersion other{};
      if (PinExactOther(*area_, 0, buffer, &other)) {
        ++moved_back;
        buffer = other.buffer;
        version = other.version;
      } else {
        ASSERT_TRUE(ReclaimPin(*area_, 0, 1'000'000'000));
        version = area_->buffer_version[buffer].load();
      }
    }
    if (buffer != kNoBuffer) {
      ++checks;
      if (!Holds(buffer, version)) ++mismatches;
    }
  }
  stop = true;
  dsmd.join();
  EXPECT_EQ(mismatches, 0u) << "of " << checks << " checks";
  EXPECT_GT(in_place.load(), 0u);
  EXPECT_GT(to_spare.load(), 0u);
  std::printf("checks %llu, versions in place %llu, to the spare %llu, moved back %llu\n",
              static_cast<unsigned long long>(checks),
              static_cast<unsigned long long>(in_place.load()),
              static_cast<unsigned long long>(to_spare.load()),
              static_cast<unsigned long long>(moved_back));
}

}  // namespace
}  // namespace dsm
