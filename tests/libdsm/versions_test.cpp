// One writer, two reader processes, one daemon: >= 1000 versions of a 16 MiB
// area in which every 8-byte word holds the number of the version that wrote it.
// Readers must only ever see uniform snapshots whose value is their version, in
// increasing order, and end byte-for-byte equal to the writer (XXH3).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using testing::DsmdProcess;
using testing::Reap;
using testing::Shared;
using testing::Spawn;

constexpr size_t kAreaBytes = 16u << 20;
constexpr size_t kWords = kAreaBytes / sizeof(uint64_t);
constexpr uint64_t kVersions = 1000;
constexpr int kReaders = 2;

struct ReaderReport {
  uint64_t snapshots = 0;
  uint64_t distinct_versions = 0;
  uint64_t torn = 0;       // snapshots whose words disagree, or disagree with the version
  uint64_t backwards = 0;  // version lower than one seen before
  uint64_t final_version = 0;
  uint64_t final_hash = 0;
};

struct Board {
  std::atomic<bool> writer_done{false};
  std::atomic<int> readers_finished{0};
  uint64_t writer_version = 0;
  uint64_t writer_hash = 0;
  uint64_t busy_publishes = 0;
  ReaderReport readers[kReaders];
};

int Writer(Board* board) {
  if (dsm_init(nullptr) != DSM_OK) return 10;
  void* p = nullptr;
  if (dsm_alloc("versions/area", kAreaBytes, nullptr, &p) != DSM_OK) return 11;
  auto* words = static_cast<uint64_t*>(p);
  for (uint64_t v = 1; v <= kVersions; ++v) {
    for (size_t i = 0; i < kWords; ++i) words[i] = v;
    if (dsm_log(p, kAreaBytes) != DSM_OK) return 12;
    // A reader holding the spare buffer makes publish return BUSY: it never
    // blocks the writer, which simply tries again a little later.
    int rc;
    for (int attempt = 0; (rc = dsm_publish(p)) == DSM_ERR_BUSY && attempt < 100000; ++attempt) {
      ++board->busy_publishes;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (rc != DSM_OK || dsm_version(p) != v) return 13;
  }
  board->writer_version = dsm_version(p);
  board->writer_hash = XXH3_64bits(p, kAreaBytes);
  board->writer_done = true;
  // Stay alive until the readers have finished, so the area stays live.
  testing::WaitFor([&] { return board->readers_finished == kReaders; }, 60000);
  dsm_fini();
  return 0;
}

int Reader(Board* board, int id) {
  if (dsm_init(nullptr) != DSM_OK) return 20;
  const void* p = nullptr;
  size_t size = 0;
  if (dsm_attach("versions/area", 10000, &p, &size) != DSM_OK || size != kAreaBytes) return 21;
  const auto* words = static_cast<const uint64_t*>(p);
  ReaderReport& r = board->readers[id];
  uint64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v < last) ++r.backwards;
    if (v != last) ++r.distinct_versions;
    last = v;
    ++r.snapshots;
    // Version 0 is the zero-filled area before the first publish.
    for (size_t i = 0; i < kWords; ++i) {
      if (words[i] != v) {
        ++r.torn;
        break;
      }
    }
    if (board->writer_done && v == board->writer_version) break;
  }
  r.final_version = dsm_version(p);
  r.final_hash = XXH3_64bits(p, kAreaBytes);
  ++board->readers_finished;
  dsm_fini();
  return 0;
}

TEST(Versions, ReadersSeeOnlyCompleteVersionsInOrder) {
  DsmdProcess daemon({"--region-size", "256M"});
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<Board> board;
  const pid_t writer = Spawn([&] { return Writer(&*board); });
  pid_t readers[kReaders];
  for (int i = 0; i < kReaders; ++i) readers[i] = Spawn([&, i] { return Reader(&*board, i); });
  for (pid_t r : readers) EXPECT_EQ(Reap(r, 90000), 0);
  EXPECT_EQ(Reap(writer, 90000), 0);

  EXPECT_EQ(board->writer_version, kVersions);
  for (const ReaderReport& r : board->readers) {
    EXPECT_EQ(r.torn, 0u);
    EXPECT_EQ(r.backwards, 0u);
    EXPECT_GT(r.distinct_versions, 10u) << "readers should follow many versions";
    EXPECT_EQ(r.final_version, kVersions);
    EXPECT_EQ(r.final_hash, board->writer_hash);
  }
  std::printf("readers saw %lu and %lu distinct versions in %lu and %lu snapshots; writer "
              "retried %lu busy publishes\n",
              static_cast<unsigned long>(board->readers[0].distinct_versions),
              static_cast<unsigned long>(board->readers[1].distinct_versions),
              static_cast<unsigned long>(board->readers[0].snapshots),
              static_cast<unsigned long>(board->readers[1].snapshots),
              static_cast<unsigned long>(board->busy_publishes));
}

}  // namespace
}  // namespace dsm
