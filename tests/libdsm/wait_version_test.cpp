// dsm_wait_version returns as soon as the version is visible and times out
// cleanly (with the version still readable) when it does not come.
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

}  // namespace
}  // namespace dsm
