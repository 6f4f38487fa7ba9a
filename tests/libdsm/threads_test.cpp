// Several threads of one writer process: a version is taken only when every
// online thread is at a quiescent point, so no version holds a half-written
// step of any thread; a thread that goes offline is not waited for.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using testing::Reap;
using testing::Shared;
using testing::Spawn;

constexpr int kThreads = 2;
constexpr size_t kSliceWords = 64 * 1024;  // 512 KiB per thread
constexpr size_t kAreaBytes = kThreads * kSliceWords * sizeof(uint64_t);

struct Board {
  std::atomic<bool> allocated{false};
  std::atomic<bool> reader_attached{false};
  std::atomic<bool> writers_done{false};
  std::atomic<bool> reader_done{false};
  uint64_t versions_seen = 0;
  uint64_t torn_slices = 0;
  uint64_t final_version = 0;
  int busy_services = 0;
  bool offline_thread_blocked = false;
};

int WriterProcess(Board* b) {
  if (dsm_init(nullptr) != DSM_OK) return 1;
  void* p = nullptr;
  if (dsm_alloc("threads/area", kAreaBytes, nullptr, &p) != DSM_OK) return 2;
  auto* words = static_cast<uint64_t*>(p);
  b->allocated = true;
  std::atomic<int> busy{0};
  // A thread that registers, then goes offline and sleeps: syncs must not wait for it.
  std::atomic<bool> idle_registered{false};
  std::thread idle([&] {
    dsm_service();
    dsm_thread_offline();
    idle_registered = true;
    std::this_thread::sleep_for(std::chrono::seconds(2));
    dsm_thread_online();
    dsm_thread_offline();
  });
  while (!idle_registered) std::this_thread::yield();
  testing::WaitFor([&] { return b->reader_attached.load(); }, 10000);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      uint64_t* slice = words + t * kSliceWords;
      for (uint64_t step = 1; step <= 400; ++step) {
        for (size_t i = 0; i < kSliceWords; ++i) slice[i] = step;
        dsm_log(slice, kSliceWords * sizeof(uint64_t));
        if (dsm_service() == DSM_ERR_BUSY) ++busy;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      dsm_thread_offline();  // done: the other worker must not wait for us
    });
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& w : workers) w.join();
  // The workers finished long before the idle thread's 2 s sleep ends.
  b->offline_thread_blocked = std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(1900);
  b->busy_services = busy;
  while (dsm_publish(p) == DSM_ERR_BUSY) std::this_thread::sleep_for(std::chrono::microseconds(100));
  b->final_version = dsm_version(p);
  b->writers_done = true;
  testing::WaitFor([&] { return b->reader_done.load(); }, 30000);
  idle.join();
  return dsm_fini();
}

int ReaderProcess(Board* b) {
  if (dsm_init(nullptr) != DSM_OK) return 1;
  const void* p = nullptr;
  if (dsm_attach("threads/area", 10000, &p, nullptr) != DSM_OK) return 2;
  const auto* words = static_cast<const uint64_t*>(p);
  b->reader_attached = true;
  uint64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v != last) ++b->versions_seen;
    last = v;
    for (int t = 0; t < kThreads; ++t) {
      const uint64_t* slice = words + t * kSliceWords;
      for (size_t i = 1; i < kSliceWords; ++i) {
        if (slice[i] != slice[0]) {
          ++b->torn_slices;
          break;
        }
      }
    }
    if (b->writers_done && v == b->final_version) break;
  }
  b->reader_done = true;
  return dsm_fini();
}

TEST(Threads, VersionsAreTakenOnlyWhenEveryOnlineThreadIsQuiescent) {
  testing::DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<Board> b;
  const pid_t writer = Spawn([&] { return WriterProcess(&*b); });
  ASSERT_TRUE(testing::WaitFor([&] { return b->allocated.load(); }, 10000));
  const pid_t reader = Spawn([&] { return ReaderProcess(&*b); });
  EXPECT_EQ(Reap(reader, 60000), 0);
  EXPECT_EQ(Reap(writer, 60000), 0);
  EXPECT_EQ(b->torn_slices, 0u);
  EXPECT_GT(b->versions_seen, 10u);
  EXPECT_FALSE(b->offline_thread_blocked);
  // A worker descheduled for longer than the quiescence timeout (5 ms) makes the
  // other's sync attempt give up and retry later; on a loaded 2-core machine that
  // happens, but rarely.
  EXPECT_LT(b->busy_services, 80) << "of " << kThreads * 400 << " dsm_service calls";
}

// Threads that log neighbouring lines at once, each line with its own
// dsm_log() call, lose none of them: each thread logs into a log of its own
// (a shared log of one bit per line would lose bits to concurrent stores).
// The threads exit before the publish, so their logs outlive them, and the
// next round's new threads take the logs over.
constexpr int kLoggingThreads = 4;
constexpr size_t kLoggedLines = 64 * 1024;  // 4 MiB
constexpr int kLoggingRounds = 3;

struct LogBoard {
  std::atomic<bool> allocated{false};
  std::atomic<int> published_round{0};
  std::atomic<int> checked_round{0};
  uint64_t wrong_lines[kLoggingRounds] = {};
  int publish_rc = 0;
};

int LoggingWriter(LogBoard* b) {
  if (dsm_init(nullptr) != DSM_OK) return 1;
  void* p = nullptr;
  if (dsm_alloc("threads/logged", kLoggedLines * 64, nullptr, &p) != DSM_OK) return 2;
  auto* area = static_cast<uint8_t*>(p);
  b->allocated = true;
  for (int round = 1; round <= kLoggingRounds; ++round) {
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kLoggingThreads; ++t) {
      threads.emplace_back([&, t] {
        dsm_thread_offline();  // the main thread publishes while these are gone
        ready.fetch_add(1);
        while (ready.load() < kLoggingThreads) std::this_thread::yield();  // all at once
        for (size_t line = t; line < kLoggedLines; line += kLoggingThreads) {
          area[line * 64] = static_cast<uint8_t>(round);
          dsm_log(area + line * 64, 1);
        }
      });
    }
    for (auto& th : threads) th.join();
    int rc;
    while ((rc = dsm_publish(p)) == DSM_ERR_BUSY)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (rc != DSM_OK) b->publish_rc = rc;
    b->published_round = round;
    if (!testing::WaitFor([&] { return b->checked_round.load() >= round; }, 30000)) return 3;
  }
  return dsm_fini();
}

int LoggedReader(LogBoard* b) {
  if (dsm_init(nullptr) != DSM_OK) return 1;
  const void* p = nullptr;
  if (dsm_attach("threads/logged", 10000, &p, nullptr) != DSM_OK) return 2;
  for (int round = 1; round <= kLoggingRounds; ++round) {
    if (!testing::WaitFor([&] { return b->published_round.load() >= round; }, 30000)) return 3;
    if (dsm_wait_version(p, static_cast<uint64_t>(round), 10000) != DSM_OK) return 4;
    const auto* area = static_cast<const uint8_t*>(p);
    for (size_t line = 0; line < kLoggedLines; ++line) {
      if (area[line * 64] != round) ++b->wrong_lines[round - 1];
    }
    b->checked_round = round;
  }
  return dsm_fini();
}

TEST(Threads, ConcurrentLogsOfNeighbouringLinesLoseNoneAndOutliveTheirThreads) {
  testing::DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<LogBoard> b;
  const pid_t writer = Spawn([&] { return LoggingWriter(&*b); });
  ASSERT_TRUE(testing::WaitFor([&] { return b->allocated.load(); }, 10000));
  const pid_t reader = Spawn([&] { return LoggedReader(&*b); });
  EXPECT_EQ(Reap(reader, 60000), 0);
  EXPECT_EQ(Reap(writer, 60000), 0);
  EXPECT_EQ(b->publish_rc, 0);
  for (int round = 0; round < kLoggingRounds; ++round) {
    EXPECT_EQ(b->wrong_lines[round], 0u) << "round " << round + 1;
  }
}

}  // namespace
}  // namespace dsm
