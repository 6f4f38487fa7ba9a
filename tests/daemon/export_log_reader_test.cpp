// dsmd's side of the export protocol against a writer simulated in the test:
// every line a publish logged is taken exactly once and in time for the
// version it belongs to, also when the writer stays inside a publish longer
// than dsmd waits.
#include "daemon/export_log_reader.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace dsm {
namespace {

constexpr size_t kAreaBytes = 16 * kPageBytes;

// One area's control block and logs, and the writer's half of the protocol
// (libdsm's ExportGuard and ExportChanges, spelled out step by step so a
// test can stop the writer inside a publish).
class ExportLogReaderTest : public ::testing::Test {
 protected:
  ExportLogReaderTest()
      : area_(std::make_unique<AreaControl>()),
        logs_(2 * kAreaBytes / kPageBytes),
        reader_(area_.get(), logs_.data()) {
    area_->state.store(static_cast<uint32_t>(AreaState::kLive));
    area_->export_pages = kAreaBytes / kPageBytes;
  }

  void BeginPublish() { area_->export_seq.fetch_add(1); }
  // Logs `line` as changed by version `version` into the log the writer uses now.
  void LogLine(size_t line, uint64_t version) {
    const uint32_t index = area_->export_index.load();
    logs_[index * area_->export_pages + line / kLinesPerPage].fetch_or(uint64_t{1}
                                                                       << (line % kLinesPerPage));
    area_->export_version[index].store(version);
  }
  void EndPublish() { area_->export_seq.fetch_add(1); }
  void Publish(size_t line, uint64_t version) {
    BeginPublish();
    LogLine(line, version);
    EndPublish();
  }

  std::unique_ptr<AreaControl> area_;
  std::vector<std::atomic<uint64_t>> logs_;
  ExportLogReader reader_;
};

TEST_F(ExportLogReaderTest, TakesWhatEachPublishLoggedOnce) {
  Publish(3, 1);
  Publish(70, 2);
  LineSet taken(kAreaBytes);
  ASSERT_TRUE(reader_.Take(&taken, 1'000'000));
  EXPECT_EQ(reader_.taken_version(), 2u);
  EXPECT_TRUE(taken.Test(3));
  EXPECT_TRUE(taken.Test(70));
  EXPECT_EQ(taken.CountLines(), 2u);

  Publish(5, 3);
  LineSet next(kAreaBytes);
  ASSERT_TRUE(reader_.Take(&next, 1'000'000));
  EXPECT_EQ(reader_.taken_version(), 3u);
  EXPECT_EQ(next.CountLines(), 1u) << "lines taken before are not taken again";
  EXPECT_TRUE(next.Test(5));
}

TEST_F(ExportLogReaderTest, AWriterStillInsideAPublishKeepsItsOldLogForTheNextTake) {
  // Versions 1 and 2 went into the log in use; the writer is inside the
  // publish of 3 (descheduled, say) when dsmd flips, and stays there longer
  // than dsmd waits.
  Publish(10, 1);
  Publish(20, 2);
  BeginPublish();
  LineSet taken(kAreaBytes);
  EXPECT_FALSE(reader_.Take(&taken, 1'000));
  EXPECT_TRUE(taken.Empty()) << "nothing may be taken while the writer can still write it";
  // Its publish of 3 read the log index before the flip.
  const uint32_t in_use = area_->export_index.load();
  area_->export_index.store(1 - in_use);
  LogLine(30, 3);
  area_->export_index.store(in_use);
  EndPublish();
  // Version 4 goes into the log dsmd flipped to.
  Publish(40, 4);

  // The next take must bring versions 1-3 too: the version dsmd pins next (4)
  // is shipped with exactly these lines, and any left behind would reach the
  // other hosts only with some later version.
  ASSERT_TRUE(reader_.Take(&taken, 1'000'000));
  if (reader_.taken_version() < 4) {
    ASSERT_TRUE(reader_.Take(&taken, 1'000'000));
  }
  EXPECT_EQ(reader_.taken_version(), 4u);
  for (size_t line : {10, 20, 30, 40}) EXPECT_TRUE(taken.Test(line)) << "line " << line;
}

TEST_F(ExportLogReaderTest, AWriterThatDiedInsideAPublishDoesNotHoldTheTakeBack) {
  Publish(7, 1);
  BeginPublish();
  LogLine(8, 2);
  area_->state.store(static_cast<uint32_t>(AreaState::kSealed));
  LineSet taken(kAreaBytes);
  ASSERT_TRUE(reader_.Take(&taken, 10'000'000'000));
  EXPECT_TRUE(taken.Test(7));
  EXPECT_TRUE(taken.Test(8)) << "what the dead writer logged is taken too (a superset is exact)";
}

TEST_F(ExportLogReaderTest, AddCurrentLeavesTheWritersLogInPlace) {
  Publish(1, 1);
  LineSet taken(kAreaBytes);
  ASSERT_TRUE(reader_.Take(&taken, 1'000'000));
  Publish(2, 2);
  LineSet superset(kAreaBytes);
  reader_.AddCurrent(&superset);
  EXPECT_TRUE(superset.Test(2));
  LineSet next(kAreaBytes);
  ASSERT_TRUE(reader_.Take(&next, 1'000'000));
  EXPECT_TRUE(next.Test(2)) << "added, not taken: the next take still has it";
}

}  // namespace
}  // namespace dsm
