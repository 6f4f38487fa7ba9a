// The rules AreaExport keeps for a local area other hosts replicate: when a
// version is collected, where its frames are read from, when the buffer it
// ships from goes back to the writer and whether it is copied first, and
// what a report of missing frames brings.
#include "coherence/area_export.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <span>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/sync_params.h"
#include "coherence/wire_format.h"
#include "tests/coherence/recording_marks.h"

namespace dsm {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kArea = 1000 * kLineBytes;
// 8 lines per frame: the whole area is 125 frames.
constexpr size_t kFrameBytes = sizeof(wire::Header) + sizeof(wire::Run) + 8 * kLineBytes;
constexpr uint16_t kHostA = 2;
constexpr uint16_t kHostB = 3;
// A whole test transfer (125 frames of the whole area) goes out in one turn:
// the rules these tests name are about versions, not bursts.
SyncParams OneTurnPerTransfer() {
  SyncParams p;
  p.send_burst_frames = 256;
  return p;
}
const SyncParams kParams = OneTurnPerTransfer();
constexpr uint64_t kT0 = 1'000'000'000;

// A writer's host with three reader buffers, reduced to what AreaExport sees,
// and a device that records the frames it is handed.
class FakeWriterHost : public ExportHost, public ExportFrameOut {
 public:
  FakeWriterHost() : buffers(3, Bytes(kArea, 0)), untaken(kArea) {}

  // ---- the writer: publishes `lines` (rewritten with `value`) as the next
  // version into the spare that is not pinned.
  void Publish(std::initializer_list<size_t> lines, uint8_t value) {
    int target = -1;
    for (int b = 0; b < 3 && target < 0; ++b) {
      if (static_cast<uint32_t>(b) != latest && b != pin_) target = b;
    }
    ASSERT_GE(target, 0);
    Bytes next = buffers[latest];
    for (size_t l : lines) {
      std::memset(next.data() + l * kLineBytes, value, kLineBytes);
      untaken.AddLines(l, 1);
    }
    buffers[static_cast<size_t>(target)] = next;
    latest = static_cast<uint32_t>(target);
    ++version;
    untaken_version = version;
  }

  std::vector<Bytes> buffers;
  uint32_t latest = 0;
  uint64_t version = 1;
  LineSet untaken;  // the export log: changed since the last take
  uint64_t untaken_version = 1;
  bool in_publish = false;
  bool spare_wanted = false;
  bool tails_in_use = false;
  size_t device_backlog = 0;

  struct Frame {
    uint16_t dest;
    bool in_place;
    Bytes bytes;
    bool urgent = false;
    wire::Frame decoded() const {
      wire::Frame f{};
      EXPECT_EQ(wire::Decode(bytes, &f), wire::DropReason::kNone);
      return f;
    }
  };
  std::vector<Frame> frames;
  int pin() const { return pin_; }

  // ---- ExportHost
  uint64_t LatestVersion() override { return version; }
  bool TakeChanges(LineSet* into, uint64_t* taken_version) override {
    if (in_publish) return false;
    into->Merge(untaken);
    untaken.Clear();
    *taken_version = untaken_version;
    return true;
  }
  void AddUntakenChanges(LineSet* into) override { into->Merge(untaken); }
  bool PinLatest(int, int* buffer, uint64_t* v) override {
    *buffer = static_cast<int>(latest);
    *v = version;
    if (publish_during_pin_) {
      publish_during_pin_ = false;
      Publish({publish_line_}, 0x77);  // lands after the take, before the pin
      *buffer = static_cast<int>(latest);
      *v = version;
    }
    return true;
  }
  void SetPin(int buffer) override { pin_ = buffer; }
  const uint8_t* Buffer(int buffer) override { return buffers[static_cast<size_t>(buffer)].data(); }
  bool WriterWantsBuffer(int pinned) override {
    return spare_wanted && pinned >= 0 && static_cast<uint32_t>(pinned) != latest;
  }
  bool TakeBufferRequest() override { return std::exchange(spare_wanted, false); }
  void ClearBufferRequest() override { spare_wanted = false; }
  bool TailsInUse() override { return tails_in_use; }

  // ---- ExportFrameOut
  size_t max_frame_bytes() override { return kFrameBytes; }
  size_t backlog() override { return device_backlog; }
  uint8_t* Reserve(uint16_t dest, bool urgent) override {
    dest_ = dest;
    urgent_ = urgent;
    scratch_.assign(kFrameBytes, 0xcd);
    return scratch_.data();
  }
  void Commit(size_t bytes) override {
    frames.push_back(
        {dest_, false,
         Bytes(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(bytes)), urgent_});
  }
  void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                      bool in_place) override {
    Bytes b(reserved, reserved + head_bytes);
    b.insert(b.end(), tail.begin(), tail.end());
    frames.push_back({dest_, in_place, std::move(b), urgent_});
  }

  // The next pin publishes line `line` first (the writer was faster).
  void PublishDuringNextPin(size_t line) {
    publish_during_pin_ = true;
    publish_line_ = line;
  }

 private:
  int pin_ = -1;
  bool publish_during_pin_ = false;
  size_t publish_line_ = 0;
  uint16_t dest_ = 0;
  bool urgent_ = false;
  Bytes scratch_;
};

class AreaExportTest : public ::testing::Test {
 public:
  AreaExportTest() : export_(kArea, kArea, true, Header(), kParams, &host_, &host_, &counters_) {
    std::mt19937_64 rng(1);
    for (uint8_t& b : host_.buffers[0]) b = static_cast<uint8_t>(rng());
  }
  // What every DATA frame of the test area carries.
  static wire::Header Header() {
    wire::Header h{};
    h.magic = wire::kMagic;
    h.protocol_version = wire::kProtocolVersion;
    h.source_host = 1;
    h.area_index = 3;
    h.area_generation = 1;
    return h;
  }

 protected:
  // Every line the frames carry, checked against the writer's version `v`
  // content `content`; returns the lines.
  LineSet CheckFrames(uint64_t v, const Bytes& content) {
    LineSet lines(kArea);
    for (const auto& fr : host_.frames) {
      const wire::Frame f = fr.decoded();
      EXPECT_EQ(f.header.version, v);
      const uint8_t* data = f.line_data.data();
      for (const wire::Run& run : f.runs) {
        const size_t bytes = size_t{run.line_count} * kLineBytes;
        EXPECT_EQ(std::memcmp(data, content.data() + size_t{run.first_line} * kLineBytes, bytes), 0)
            << "lines " << run.first_line << "+" << run.line_count;
        lines.AddLines(run.first_line, run.line_count);
        data += bytes;
      }
    }
    return lines;
  }
  // Both hosts acknowledge version `v`.
  void AckAll(uint64_t v, uint64_t now) {
    export_.OnAck(kHostA, v, false, 0, 0, {}, now);
    export_.OnAck(kHostB, v, false, 0, 0, {}, now);
  }

  FakeWriterHost host_;
  ExportCounters counters_;
  AreaExport export_;
};

TEST_F(AreaExportTest, AFirstTransferCarriesTheWholeAreaReadInPlaceFromThePinnedBuffer) {
  export_.Subscribe(kHostA);
  export_.Subscribe(kHostB);
  EXPECT_TRUE(export_.Turn(kT0));
  EXPECT_EQ(export_.pinned(), 0);
  EXPECT_EQ(host_.pin(), 0);
  ASSERT_EQ(host_.frames.size(), 125u);
  for (const auto& f : host_.frames) {
    EXPECT_TRUE(f.in_place) << "lines are read where the version is, not copied";
    EXPECT_EQ(f.dest, wire::kAllHosts) << "one copy for both hosts";
  }
  EXPECT_EQ(CheckFrames(1, host_.buffers[0]).CountLines(), 1000u);
  EXPECT_EQ(counters_.versions_shadowed, 0u);
}

TEST_F(AreaExportTest, TheNextVersionWaitsForEveryAckOrTheTimeoutAndCarriesOnlyItsChanges) {
  export_.Subscribe(kHostA);
  export_.Turn(kT0);
  host_.Publish({7, 900}, 0x11);
  host_.frames.clear();
  export_.Turn(kT0 + 1);
  EXPECT_TRUE(host_.frames.empty()) << "hosts are still taking version 1 in";
  AckAll(1, kT0 + 2);
  export_.Turn(kT0 + 3);
  EXPECT_EQ(CheckFrames(2, host_.buffers[host_.latest]).CountLines(), 2u);
  EXPECT_EQ(counters_.versions_collected, 2u);
}

TEST_F(AreaExportTest, ATransferOfAFewFramesGoesAheadOfABacklogAndBulkWaitsForIt) {
  export_.Subscribe(kHostA);
  export_.Turn(kT0);
  ASSERT_EQ(host_.frames.size(), 125u);
  EXPECT_FALSE(host_.frames.front().urgent) << "the whole area is bulk";
  export_.OnAck(kHostA, 1, false, 0, 0, {}, kT0 + 1);
  // The device is far behind; the next version is one line, one frame.
  host_.device_backlog = 10 * kParams.send_burst_frames;
  host_.Publish({7}, 0x11);
  host_.frames.clear();
  export_.Turn(kT0 + 2);
  ASSERT_EQ(host_.frames.size(), 1u) << "not held up by the backlog";
  EXPECT_TRUE(host_.frames.front().urgent);
  EXPECT_EQ(CheckFrames(2, host_.buffers[host_.latest]).CountLines(), 1u);
  export_.OnAck(kHostA, 2, false, 0, 0, {}, kT0 + 3);
  // 32 lines: 4 frames, more than kParams.urgent_max_frames.
  std::initializer_list<size_t> many = {0,   10,  20,  30,  40,  50,  60,  70,  80,  90,  100,
                                        110, 120, 130, 140, 150, 160, 170, 180, 190, 200, 210,
                                        220, 230, 240, 250, 260, 270, 280, 290, 300, 310};
  host_.Publish(many, 0x22);
  host_.frames.clear();
  export_.Turn(kT0 + 4);
  EXPECT_TRUE(host_.frames.empty()) << "bulk waits for the device";
  host_.device_backlog = 0;
  export_.Turn(kT0 + 5);
  ASSERT_GT(host_.frames.size(), size_t{kParams.urgent_max_frames});
  for (const auto& f : host_.frames) EXPECT_FALSE(f.urgent);
  EXPECT_EQ(CheckFrames(3, host_.buffers[host_.latest]).CountLines(), many.size());
}

TEST_F(AreaExportTest, EachVersionSentIsMarkedCollectedPlannedAndFramedInThatOrder) {
  ::dsm::testing::RecordingMarks marks;
  export_.set_stage_marks(&marks);
  export_.Subscribe(kHostA);
  export_.Subscribe(kHostB);
  export_.Turn(kT0);
  using S = Stage;
  EXPECT_EQ(marks.StagesOf(1),
            (std::vector<S>{S::kCollectBegin, S::kCollected, S::kPlanned, S::kFramed}));
  for (const auto& m : marks.marks) EXPECT_EQ(m.peer, wire::kAllHosts) << "one transfer for both";
  host_.Publish({7, 900}, 0x11);
  export_.Turn(kT0 + 1);
  EXPECT_TRUE(marks.StagesOf(2).empty()) << "not collected while hosts take version 1 in";
  AckAll(1, kT0 + 2);
  export_.Turn(kT0 + 3);
  EXPECT_EQ(marks.StagesOf(2),
            (std::vector<S>{S::kCollectBegin, S::kCollected, S::kPlanned, S::kFramed}));
  EXPECT_TRUE(marks.InTimeOrder());
}

TEST_F(AreaExportTest, ASilentHostHoldsTheNextVersionBackNoLongerThanTheTimeout) {
  export_.Subscribe(kHostA);
  export_.Turn(kT0);
  host_.Publish({7}, 0x11);
  host_.frames.clear();
  export_.Turn(kT0 + kParams.retransmit_timeout_ns - 1);
  EXPECT_TRUE(host_.frames.empty());
  export_.Turn(kT0 + kParams.retransmit_timeout_ns);
  // It acknowledged nothing: the union of what it lacks, the whole area at
  // version 2.
  EXPECT_EQ(CheckFrames(2, host_.buffers[host_.latest]).CountLines(), 1000u);
}

TEST_F(AreaExportTest, NoCollectWhileTheWriterIsInsideAPublish) {
  export_.Subscribe(kHostA);
  export_.Turn(kT0);
  AckAll(1, kT0 + 1);
  host_.Publish({5}, 0x22);
  host_.in_publish = true;
  host_.frames.clear();
  export_.Turn(kT0 + 2);
  EXPECT_TRUE(host_.frames.empty());
  EXPECT_EQ(counters_.versions_collected, 1u);
  host_.in_publish = false;
  export_.Turn(kT0 + 3);
  EXPECT_EQ(CheckFrames(2, host_.buffers[host_.latest]).CountLines(), 1u);
}

TEST_F(AreaExportTest, AVersionPublishedBetweenTakeAndPinHasItsLinesTakenToo) {
  export_.Subscribe(kHostA);
  export_.Turn(kT0);
  AckAll(1, kT0 + 1);
  host_.Publish({5}, 0x22);
  host_.PublishDuringNextPin(600);
  host_.frames.clear();
  export_.Turn(kT0 + 2);
  // The pin holds version 3: the frames must carry line 600 as well as 5.
  const LineSet lines = CheckFrames(3, host_.buffers[host_.latest]);
  EXPECT_TRUE(lines.Test(5));
  EXPECT_TRUE(lines.Test(600));
}

TEST_F(AreaExportTest, NoCollectWhileTheDeviceStillReadsFramesFromThePinnedBuffer) {
  export_.Subscribe(kHostA);
  export_.Turn(kT0);
  AckAll(1, kT0 + 1);
  host_.Publish({5}, 0x22);
  host_.tails_in_use = true;
  host_.frames.clear();
  export_.Turn(kT0 + 2);
  EXPECT_TRUE(host_.frames.empty());
  EXPECT_EQ(export_.pinned(), 0) << "the pin stays under the device's frames";
  host_.tails_in_use = false;
  export_.Turn(kT0 + 3);
  EXPECT_FALSE(host_.frames.empty());
}

TEST_F(AreaExportTest, TheWriterGetsItsBufferCopiedAsideWhileFramesOfItAreStillToGo) {
  export_.Subscribe(kHostA);
  host_.device_backlog = kParams.send_burst_frames;  // the device takes nothing yet
  export_.Turn(kT0);
  ASSERT_TRUE(host_.frames.empty());
  const Bytes v1 = host_.buffers[0];
  host_.Publish({5}, 0x22);  // into buffer 1; buffer 0 is pinned
  host_.spare_wanted = true;  // and the writer wants a spare for the next one
  export_.Turn(kT0 + 1);
  EXPECT_EQ(export_.pinned(), -1);
  EXPECT_EQ(host_.pin(), -1) << "the writer has its buffer back";
  EXPECT_EQ(counters_.versions_shadowed, 1u);
  host_.buffers[0].assign(kArea, 0x99);  // the writer reuses it
  host_.device_backlog = 0;
  export_.Turn(kT0 + 2);
  ASSERT_EQ(host_.frames.size(), 125u);
  for (const auto& f : host_.frames) EXPECT_FALSE(f.in_place) << "the shadow may change: copied";
  CheckFrames(1, v1);
}

TEST_F(AreaExportTest, WhileTheWriterWaitsForThePinnedBufferNewFramesCopyTheirLines) {
  export_.Subscribe(kHostA);
  export_.Turn(kT0);
  ASSERT_EQ(host_.frames.size(), 125u);
  host_.tails_in_use = true;  // the device still reads some of them in place
  const uint32_t transfer = host_.frames[0].decoded().header.transfer_id;
  host_.Publish({5}, 0x22);
  host_.spare_wanted = true;
  export_.Turn(kT0 + 1);
  EXPECT_EQ(host_.pin(), 0) << "not while the device reads it";
  // Host A asks for frames again and again: were they read in place too, the
  // device would never let go of the buffer, nor the writer get it.
  host_.frames.clear();
  const wire::SeqRange lost{9, 3};
  export_.OnAck(kHostA, 0, true, 1, transfer, std::span<const wire::SeqRange>(&lost, 1),
                kT0 + kParams.nack_after_ns);
  export_.Turn(kT0 + kParams.nack_after_ns);
  ASSERT_EQ(host_.frames.size(), 3u);
  for (const auto& f : host_.frames) EXPECT_FALSE(f.in_place);
  CheckFrames(1, host_.buffers[0]);
  host_.tails_in_use = false;  // the frames read in place are out
  export_.Turn(kT0 + kParams.nack_after_ns + 1);
  EXPECT_EQ(host_.pin(), -1) << "the writer has its buffer";
}

TEST_F(AreaExportTest, ABufferWantedOnceEveryFrameIsOutGoesBackUncopiedAndLossBringsTheNext) {
  export_.Subscribe(kHostA);
  export_.Turn(kT0);
  ASSERT_EQ(host_.frames.size(), 125u);
  host_.Publish({5}, 0x22);
  host_.spare_wanted = true;
  export_.Turn(kT0 + 1);
  EXPECT_EQ(counters_.pins_yielded, 1u);
  EXPECT_EQ(counters_.versions_shadowed, 0u);
  // Host A lost frame 9 of version 1, which is gone: what it lacks comes at
  // once with the newest version, as a whole-area transfer (it holds none).
  const wire::SeqRange lost{9, 1};
  const uint32_t transfer = host_.frames[0].decoded().header.transfer_id;
  host_.frames.clear();
  export_.OnAck(kHostA, 0, true, 1, transfer, std::span<const wire::SeqRange>(&lost, 1), kT0 + 2);
  EXPECT_TRUE(host_.frames.empty()) << "nothing to resend from";
  export_.Turn(kT0 + 3);
  ASSERT_EQ(host_.frames.size(), 125u);
  EXPECT_EQ(CheckFrames(2, host_.buffers[host_.latest]).CountLines(), 1000u);
}

TEST_F(AreaExportTest, MissingFramesOfTheCollectedVersionAreResentToTheHostThatAsked) {
  export_.Subscribe(kHostA);
  export_.Subscribe(kHostB);
  export_.Turn(kT0);
  const uint32_t transfer = host_.frames[0].decoded().header.transfer_id;
  const wire::SeqRange lost[] = {{3, 2}, {100, 1}};
  host_.frames.clear();
  export_.OnAck(kHostA, 0, true, 1, transfer, lost, kT0 + kParams.nack_after_ns);
  EXPECT_TRUE(host_.frames.empty()) << "queued, to go as the device takes them";
  EXPECT_TRUE(export_.Due(kT0 + kParams.nack_after_ns));
  export_.Turn(kT0 + kParams.nack_after_ns);
  ASSERT_EQ(host_.frames.size(), 3u);
  for (const auto& f : host_.frames) {
    EXPECT_EQ(f.dest, kHostA);
    EXPECT_EQ(f.decoded().header.transfer_id, transfer);
  }
  EXPECT_EQ(host_.frames[0].decoded().header.seq, 3u);
  EXPECT_EQ(host_.frames[2].decoded().header.seq, 100u);
  CheckFrames(1, host_.buffers[0]);
  EXPECT_EQ(counters_.retransmitted_frames, 3u);
}

// A NACK may list a whole version's frames, more than the device holds: they
// go a burst per turn, as the device takes them, each once however often the
// host repeats its report before they went.
TEST(AreaExportResendTest, AReportOfManyFramesIsResentABurstPerTurnEachFrameOnce) {
  SyncParams params;
  params.send_burst_frames = 16;
  FakeWriterHost host;
  ExportCounters counters;
  AreaExport ex(kArea, kArea, true, AreaExportTest::Header(), params, &host, &host, &counters);
  ex.Subscribe(kHostA);
  for (int turn = 0; turn < 20; ++turn) ex.Turn(kT0);
  ASSERT_EQ(host.frames.size(), 125u);
  const uint32_t transfer = host.frames[0].decoded().header.transfer_id;
  host.frames.clear();
  const wire::SeqRange all{0, 125};
  const wire::SeqRange some[] = {{3, 10}, {120, 5}};
  ex.OnAck(kHostA, 0, true, 1, transfer, std::span<const wire::SeqRange>(&all, 1), kT0 + 1);
  ex.Turn(kT0 + 2);
  EXPECT_EQ(host.frames.size(), 16u) << "one burst per turn";
  // The host asks again for frames that have not gone yet, and for some that have.
  ex.OnAck(kHostA, 0, true, 1, transfer, std::span<const wire::SeqRange>(&all, 1), kT0 + 3);
  ex.OnAck(kHostA, 0, true, 1, transfer, some, kT0 + 3);
  host.device_backlog = params.send_burst_frames;
  ex.Turn(kT0 + 4);
  EXPECT_EQ(host.frames.size(), 16u) << "nothing while the device is full";
  host.device_backlog = 0;
  for (int turn = 0; turn < 20 && ex.Due(kT0 + 5); ++turn) ex.Turn(kT0 + 5);
  EXPECT_FALSE(ex.Due(kT0 + 5));
  std::vector<int> sent(125, 0);
  for (const auto& f : host.frames) {
    const wire::Frame d = f.decoded();
    EXPECT_EQ(f.dest, kHostA);
    EXPECT_EQ(d.header.transfer_id, transfer);
    ++sent[d.header.seq];
  }
  // The second report came after frames 0-15 went: they go again (the
  // host still lacked them when it asked), the rest once.
  for (uint32_t seq = 0; seq < 125; ++seq) {
    EXPECT_EQ(sent[seq], seq < 16 ? 2 : 1) << "seq " << seq;
  }
  EXPECT_EQ(counters.retransmitted_frames, 141u);
}

TEST_F(AreaExportTest, OnceEveryHostHoldsTheVersionThePinIsDropped) {
  export_.Subscribe(kHostA);
  export_.Subscribe(kHostB);
  export_.Turn(kT0);
  EXPECT_EQ(host_.pin(), 0);
  export_.OnAck(kHostA, 1, false, 0, 0, {}, kT0 + 1);
  export_.Turn(kT0 + 2);
  EXPECT_EQ(host_.pin(), 0) << "host B may still ask for frames";
  export_.OnAck(kHostB, 1, false, 0, 0, {}, kT0 + 3);
  export_.Turn(kT0 + 4);
  EXPECT_EQ(host_.pin(), -1);
}

TEST_F(AreaExportTest, WithEveryHostDownNothingIsPinnedOrSent) {
  export_.Subscribe(kHostA);
  export_.SetHostUp(kHostA, false);
  export_.Turn(kT0);
  EXPECT_TRUE(host_.frames.empty());
  EXPECT_EQ(host_.pin(), -1);
  export_.SetHostUp(kHostA, true);
  export_.Turn(kT0 + 1);
  EXPECT_EQ(host_.frames.size(), 125u);
}

}  // namespace
}  // namespace dsm
