// The writer killed with SIGKILL mid-run: readers keep the last complete
// version, see it reported stale with the writer gone, and the daemon lives on.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using testing::Reap;
using testing::Shared;
using testing::Spawn;

constexpr size_t kAreaBytes = 1u << 20;
constexpr size_t kWords = kAreaBytes / sizeof(uint64_t);

struct Board {
  std::atomic<bool> allocated{false};
  std::atomic<uint64_t> reader_version{0};
  std::atomic<bool> writer_killed{false};
  std::atomic<bool> kill_soon{false};
  std::atomic<bool> measured{false};
  uint64_t checks_before = 0;
  uint64_t stale_before = 0;
  uint64_t lag_before_ns = 0;
  bool stale_after = false;
  bool alive_after = true;
  uint64_t version_at_kill = 0;
  uint64_t version_after = 0;
  uint64_t latest_after = 0;
  uint64_t torn = 0;
  int attach_after_rc = -100;
  int realloc_rc = -100;
};

bool Uniform(const uint64_t* w, uint64_t v) {
  for (size_t i = 0; i < kWords; ++i) {
    if (w[i] != v) return false;
  }
  return true;
}

TEST(WriterCrash, ReadersKeepTheLastVersionAndSeeItStale) {
  testing::DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<Board> b;
  const pid_t writer = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    dsm_alloc_opts opts{};
    opts.staleness_bound_ms = 50;
    void* p = nullptr;
    if (dsm_alloc("crash/area", kAreaBytes, &opts, &p) != DSM_OK) return 2;
    b->allocated = true;
    auto* w = static_cast<uint64_t*>(p);
    for (uint64_t v = 1; v < 10'000'000; ++v) {  // until killed
      for (size_t i = 0; i < kWords; ++i) w[i] = v;
      dsm_log(p, kAreaBytes);
      while (dsm_publish(p) == DSM_ERR_BUSY) std::this_thread::yield();
    }
    return 3;
  });
  ASSERT_TRUE(testing::WaitFor([&] { return b->allocated.load(); }, 10000));
  const pid_t reader = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    const void* p = nullptr;
    if (dsm_attach("crash/area", 5000, &p, nullptr) != DSM_OK) return 2;
    const auto* w = static_cast<const uint64_t*>(p);
    dsm_area_status st{};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!b->writer_killed && std::chrono::steady_clock::now() < deadline) {
      dsm_service();
      if (!Uniform(w, dsm_version(p))) ++b->torn;
      b->reader_version = dsm_version(p);
      if (!b->kill_soon) {
        dsm_status(p, &st);
        ++b->checks_before;
        if (st.stale) {
          ++b->stale_before;
          b->lag_before_ns = st.staleness_ns;
        }
      } else {
        b->measured = true;
      }
    }
    // The writer is dead. Keep checking in for a while: nothing may change.
    b->version_at_kill = dsm_version(p);
    for (int i = 0; i < 100; ++i) {
      dsm_service();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (!Uniform(w, dsm_version(p))) ++b->torn;
    dsm_status(p, &st);
    b->version_after = st.version;
    b->latest_after = st.latest_version;
    b->stale_after = st.stale;
    b->alive_after = st.writer_alive;
    // A late reader can still attach the sealed area and gets the same last
    // version; a restarted writer may take the name again.
    if (dsm_free(p) != DSM_OK) return 3;
    const void* again = nullptr;
    b->attach_after_rc = dsm_attach("crash/area", 1000, &again, nullptr);
    if (b->attach_after_rc == DSM_OK &&
        (dsm_version(again) != b->version_after || !Uniform(static_cast<const uint64_t*>(again),
                                                            b->version_after))) {
      ++b->torn;
    }
    void* fresh = nullptr;
    b->realloc_rc = dsm_alloc("crash/area", kAreaBytes, nullptr, &fresh);
    return dsm_fini();
  });
  ASSERT_TRUE(testing::WaitFor([&] { return b->reader_version.load() >= 20; }, 20000));
  b->kill_soon = true;
  ASSERT_TRUE(testing::WaitFor([&] { return b->measured.load(); }, 20000));
  kill(writer, SIGKILL);
  EXPECT_EQ(Reap(writer, 10000), -SIGKILL);
  // The daemon notices the dead writer through its closed socket.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  b->writer_killed = true;
  EXPECT_EQ(Reap(reader, 20000), 0);

  EXPECT_EQ(b->torn, 0u);
  EXPECT_GT(b->checks_before, 0u);
  EXPECT_EQ(b->stale_before, 0u) << "stale with the writer alive; lag " << b->lag_before_ns
                                 << " ns";
  EXPECT_GE(b->version_after, 20u);
  EXPECT_EQ(b->version_after, b->latest_after) << "the reader moved to the last complete version";
  EXPECT_TRUE(b->stale_after);
  EXPECT_FALSE(b->alive_after);
  EXPECT_EQ(b->attach_after_rc, DSM_OK);
  EXPECT_EQ(b->realloc_rc, DSM_OK);
  EXPECT_TRUE(daemon.ok());
}

}  // namespace
}  // namespace dsm
