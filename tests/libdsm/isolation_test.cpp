// A reader of area B that stops checking in for 300 ms delays nobody else: A's
// other reader keeps seeing new versions of A, and the writer's publishes of A
// and B never block.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Reap;
using testing::Shared;
using testing::Spawn;

constexpr size_t kAreaBytes = 256 * 1024;
constexpr int kMaxSamples = 20000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

struct Board {
  std::atomic<bool> allocated{false};
  std::atomic<bool> sleeper_ready{false};
  std::atomic<bool> sleep_over{false};
  std::atomic<bool> stop{false};
  std::atomic<int64_t> sleep_start_ns{0};
  std::atomic<int64_t> sleep_end_ns{0};
  int64_t writer_max_call_ns = 0;  // longest dsm_service in the writer
  uint64_t writer_a_versions = 0;
  uint64_t writer_b_versions = 0;
  uint64_t b_deferred = 0;
  // When A's reader saw each new version of A.
  int samples = 0;
  int64_t seen_at_ns[kMaxSamples];
};

int Writer(Board* b) {
  if (dsm_init(nullptr) != DSM_OK) return 1;
  void *a = nullptr, *bb = nullptr;
  if (dsm_alloc("iso/A", kAreaBytes, nullptr, &a) != DSM_OK) return 2;
  if (dsm_alloc("iso/B", kAreaBytes, nullptr, &bb) != DSM_OK) return 3;
  b->allocated = true;
  uint64_t step = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!b->stop && Clock::now() < deadline) {
    ++step;
    static_cast<uint64_t*>(a)[step % (kAreaBytes / 8)] = step;
    dsm_log(static_cast<uint64_t*>(a) + step % (kAreaBytes / 8), 8);
    static_cast<uint64_t*>(bb)[step % (kAreaBytes / 8)] = step;
    dsm_log(static_cast<uint64_t*>(bb) + step % (kAreaBytes / 8), 8);
    const int64_t t0 = NowNs();
    dsm_service();
    b->writer_max_call_ns = std::max(b->writer_max_call_ns, NowNs() - t0);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  b->writer_a_versions = dsm_version(a);
  b->writer_b_versions = dsm_version(bb);
  dsm_area_status st{};
  dsm_status(bb, &st);
  b->b_deferred = st.publishes_deferred;
  return dsm_fini();
}

int ReaderOfA(Board* b) {
  if (dsm_init(nullptr) != DSM_OK) return 1;
  const void* a = nullptr;
  if (dsm_attach("iso/A", 5000, &a, nullptr) != DSM_OK) return 2;
  uint64_t last = dsm_version(a);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!b->stop && Clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(a);
    if (v != last && b->samples < kMaxSamples) b->seen_at_ns[b->samples++] = NowNs();
    last = v;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return dsm_fini();
}

int SleepingReaderOfB(Board* b) {
  if (dsm_init(nullptr) != DSM_OK) return 1;
  const void* bb = nullptr;
  if (dsm_attach("iso/B", 5000, &bb, nullptr) != DSM_OK) return 2;
  for (int i = 0; i < 200; ++i) {  // follow B for a while first
    dsm_service();
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  b->sleeper_ready = true;
  b->sleep_start_ns = NowNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // no dsm_service
  b->sleep_end_ns = NowNs();
  b->sleep_over = true;
  return dsm_fini();
}

TEST(Isolation, ASleepingReaderOfBDelaysNeitherAnorTheWriter) {
  testing::DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<Board> b;
  const pid_t writer = Spawn([&] { return Writer(&*b); });
  ASSERT_TRUE(testing::WaitFor([&] { return b->allocated.load(); }, 10000));
  const pid_t reader = Spawn([&] { return ReaderOfA(&*b); });
  const pid_t sleeper = Spawn([&] { return SleepingReaderOfB(&*b); });
  EXPECT_TRUE(testing::WaitFor([&] { return b->sleep_over.load(); }, 20000));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  b->stop = true;
  EXPECT_EQ(Reap(sleeper, 20000), 0);
  EXPECT_EQ(Reap(reader, 20000), 0);
  EXPECT_EQ(Reap(writer, 20000), 0);

  int during_sleep = 0;
  for (int i = 0; i < b->samples; ++i) {
    if (b->seen_at_ns[i] > b->sleep_start_ns && b->seen_at_ns[i] < b->sleep_end_ns) {
      ++during_sleep;
    }
  }
  std::printf("A's reader saw %d new versions during the 300 ms sleep; writer published %lu of "
              "A and %lu of B (%lu B publishes deferred); longest writer dsm_service %.3f ms\n",
              during_sleep, static_cast<unsigned long>(b->writer_a_versions),
              static_cast<unsigned long>(b->writer_b_versions),
              static_cast<unsigned long>(b->b_deferred), b->writer_max_call_ns / 1e6);
  EXPECT_GE(during_sleep, 24) << "A's reader must keep seeing versions: dozens, not one";
  // The writer never waited for the sleeper: its longest call is far below 300 ms.
  EXPECT_LT(b->writer_max_call_ns, int64_t{100'000'000});
}

}  // namespace
}  // namespace dsm
