// dsm_wait_version returns as soon as the version is visible and times out
// cleanly (with the version still readable) when it does not come; while it
// sleeps, the process's other areas keep their syncs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
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

struct Board {
  std::atomic<bool> allocated{false};
  std::atomic<bool> publish_now{false};
  std::atomic<bool> done{false};
  std::atomic<int64_t> published_at_ns{0};
  int64_t returned_at_ns = 0;
  int64_t timed_out_after_ms = 0;
  int timeout_rc = 0;
  int wait_rc = 0;
  uint64_t version_after_timeout = 0;
  uint64_t version_after_wait = 0;
  uint32_t value_after_wait = 0;
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

TEST(WaitVersion, ReturnsOnceVisibleAndTimesOutOtherwise) {
  testing::DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<Board> b;
  const pid_t writer = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    void* p = nullptr;
    if (dsm_alloc("wait/area", 4096, nullptr, &p) != DSM_OK) return 2;
    auto* value = static_cast<uint32_t*>(p);
    *value = 1;
    dsm_log(value, sizeof(*value));
    if (dsm_publish(p) != DSM_OK) return 3;  // version 1
    b->allocated = true;
    testing::WaitFor([&] { return b->publish_now.load(); }, 20000);
    *value = 2;
    dsm_log(value, sizeof(*value));
    b->published_at_ns = NowNs();
    if (dsm_publish(p) != DSM_OK) return 4;  // version 2
    testing::WaitFor([&] { return b->done.load(); }, 20000);
    return dsm_fini();
  });
  ASSERT_TRUE(testing::WaitFor([&] { return b->allocated.load(); }, 10000));
  const pid_t reader = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    const void* p = nullptr;
    if (dsm_attach("wait/area", 5000, &p, nullptr) != DSM_OK) return 2;
    // Version 2 does not exist yet: a clean timeout, version 1 still readable.
    const auto t0 = Clock::now();
    b->timeout_rc = dsm_wait_version(p, 2, 200);
    b->timed_out_after_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    b->version_after_timeout = dsm_version(p);
    // Now ask for it and let the writer publish while we wait.
    b->publish_now = true;
    b->wait_rc = dsm_wait_version(p, 2, 10000);
    b->returned_at_ns = NowNs();
    b->version_after_wait = dsm_version(p);
    b->value_after_wait = *static_cast<const uint32_t*>(p);
    b->done = true;
    return dsm_fini();
  });
  EXPECT_EQ(Reap(reader, 30000), 0);
  EXPECT_EQ(Reap(writer, 30000), 0);

  EXPECT_EQ(b->timeout_rc, DSM_ERR_TIMEOUT);
  EXPECT_GE(b->timed_out_after_ms, 200);
  EXPECT_LT(b->timed_out_after_ms, 2000);
  EXPECT_EQ(b->version_after_timeout, 1u);
  EXPECT_EQ(b->wait_rc, DSM_OK);
  EXPECT_EQ(b->version_after_wait, 2u);
  EXPECT_EQ(b->value_after_wait, 2u);
  // It returned promptly after the publish rather than at its 10 s timeout.
  EXPECT_LT(b->returned_at_ns - b->published_at_ns.load(), int64_t{2'000'000'000});
}

struct OthersBoard {
  std::atomic<bool> ready_a{false}, ready_b{false}, ready_w{false};
  std::atomic<bool> observer_attached{false};
  std::atomic<int64_t> wait_started_ns{0};
  std::atomic<int64_t> wait_returned_ns{0};
  std::atomic<int64_t> b_published_ns{0};
  std::atomic<int64_t> b_seen_ns{0};  // when the waiting process read B at version 2
  std::atomic<int64_t> w_seen_ns{0};  // when another process read W's new value
  int wait_rc = 0;
};

// A process waits (and times out) on area A, which never gets a newer version.
// Meanwhile another process publishes area B, which it reads (100 ms into the
// wait), and its writer area W comes due (400 ms in): the sleep ends for each,
// so B's new version is read and W's change published when they happen, not
// at the next due sync or when the wait returns.
TEST(WaitVersion, SleepingKeepsTheProcessesOtherAreasInSync) {
  testing::DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<OthersBoard> b;
  auto writer_of = [&](const char* name, std::atomic<bool>* ready, bool publish_again) {
    return Spawn([&, name, ready, publish_again] {
      if (dsm_init(nullptr) != DSM_OK) return 1;
      void* p = nullptr;
      if (dsm_alloc(name, 4096, nullptr, &p) != DSM_OK) return 2;
      auto* value = static_cast<uint32_t*>(p);
      *value = 1;
      dsm_log(value, sizeof(*value));
      if (dsm_publish(p) != DSM_OK) return 3;  // version 1
      *ready = true;
      if (publish_again) {
        testing::WaitFor([&] { return b->wait_started_ns.load() != 0; }, 20000);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        *value = 2;
        dsm_log(value, sizeof(*value));
        b->b_published_ns = NowNs();
        if (dsm_publish(p) != DSM_OK) return 4;  // version 2
      }
      testing::WaitFor([&] { return b->wait_returned_ns.load() != 0; }, 20000);
      return dsm_fini();
    });
  };
  const pid_t writer_a = writer_of("wait/a", &b->ready_a, false);
  const pid_t writer_b = writer_of("wait/b", &b->ready_b, true);
  ASSERT_TRUE(testing::WaitFor([&] { return b->ready_a && b->ready_b; }, 10000));
  const pid_t waiter = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    const void* a = nullptr;
    const void* area_b = nullptr;
    if (dsm_attach("wait/a", 5000, &a, nullptr) != DSM_OK) return 2;
    if (dsm_attach("wait/b", 5000, &area_b, nullptr) != DSM_OK) return 3;
    dsm_alloc_opts opts{};
    opts.sync_interval_us = 400'000;
    void* w = nullptr;
    if (dsm_alloc("wait/w", 4096, &opts, &w) != DSM_OK) return 4;
    if (dsm_publish(w) != DSM_OK) return 5;  // version 1: zeros
    b->ready_w = true;
    testing::WaitFor([&] { return b->observer_attached.load(); }, 20000);
    if (dsm_publish(w) != DSM_OK) return 6;  // the next sync is due 400 ms from now
    auto* value = static_cast<uint32_t*>(w);
    *value = 7;  // published by that sync, during the wait
    dsm_log(value, sizeof(*value));
    // A second thread, offline (it does not hold up the waiter's syncs),
    // watches which version of B this process reads.
    std::thread watch([&] {
      dsm_thread_offline();
      testing::WaitFor(
          [&] {
            dsm_area_status st{};
            if (dsm_status(area_b, &st) == DSM_OK && st.version >= 2) b->b_seen_ns = NowNs();
            return b->b_seen_ns.load() != 0 || b->wait_returned_ns.load() != 0;
          },
          20000);
    });
    b->wait_started_ns = NowNs();
    b->wait_rc = dsm_wait_version(a, 2, 1200);
    b->wait_returned_ns = NowNs();
    watch.join();
    return dsm_fini();
  });
  ASSERT_TRUE(testing::WaitFor([&] { return b->ready_w.load(); }, 10000));
  const pid_t observer = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    const void* w = nullptr;
    if (dsm_attach("wait/w", 5000, &w, nullptr) != DSM_OK) return 2;
    b->observer_attached = true;
    testing::WaitFor(
        [&] {
          if (dsm_wait_version(w, dsm_version(w) + 1, 20) == DSM_OK &&
              *static_cast<const uint32_t*>(w) == 7) {
            b->w_seen_ns = NowNs();
          }
          return b->w_seen_ns.load() != 0 || b->wait_returned_ns.load() != 0;
        },
        20000);
    return dsm_fini();
  });
  EXPECT_EQ(Reap(waiter, 30000), 0);
  EXPECT_EQ(Reap(observer, 30000), 0);
  EXPECT_EQ(Reap(writer_a, 30000), 0);
  EXPECT_EQ(Reap(writer_b, 30000), 0);

  EXPECT_EQ(b->wait_rc, DSM_ERR_TIMEOUT);
  const int64_t returned = b->wait_returned_ns;
  // The waiting process moved to B's new version soon after its publish
  // (well before W's sync, which would otherwise have ended the sleep).
  ASSERT_NE(b->b_seen_ns.load(), 0);
  EXPECT_LT(b->b_seen_ns - b->b_published_ns, int64_t{200'000'000});
  // W's change went out with its sync 400 ms into the wait, not at its end.
  ASSERT_NE(b->w_seen_ns.load(), 0);
  EXPECT_GT(b->w_seen_ns - b->wait_started_ns, int64_t{300'000'000});
  EXPECT_LT(b->w_seen_ns - b->wait_started_ns, int64_t{800'000'000});
  EXPECT_LT(b->w_seen_ns.load(), returned);
}

}  // namespace
}  // namespace dsm
