// A writer that publishes its last versions and frees the area at once (as a
// C++ handle going out of scope does) must not lose them on other hosts:
// dsm_free waits until every replicating host acknowledged the last version,
// and a reader on another host then finds that version, complete.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "dsm/dsm.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/dsm_helpers.h"

namespace dsm::testing {
namespace {

constexpr size_t kWords = (512u << 10) / 8;
constexpr uint64_t kLastVersion = 20;

struct Board {
  std::atomic<bool> reader_has_first{false};
  std::atomic<bool> reader_done{false};
  double free_ms = 0;
  uint64_t reader_version = 0;
  uint64_t reader_torn = 0;
  int reader_wait_rc = 0;
};

int Writer(const std::string& socket, Board* b) {
  dsm_init_opts init{};
  init.socket_path = socket.c_str();
  if (dsm_init(&init) != DSM_OK) return 10;
  void* p = nullptr;
  if (dsm_alloc("free/last", kWords * 8, nullptr, &p) != DSM_OK) return 11;
  auto* words = static_cast<uint64_t*>(p);
  for (uint64_t v = 1; v <= kLastVersion; ++v) {
    for (size_t i = 0; i < kWords; ++i) words[i] = v;
    dsm_log(p, kWords * 8);
    if (PublishRetrying(p) != DSM_OK) return 12;
    // The reader on the other host follows version 1, then the rest come in a
    // burst with the free right behind.
    if (v == 1 && !WaitFor([&] { return b->reader_has_first.load(); }, 30000)) return 13;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (dsm_free(p) != DSM_OK) return 14;
  b->free_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  WaitFor([&] { return b->reader_done.load(); }, 30000);
  dsm_fini();
  return 0;
}

int Reader(const std::string& socket, Board* b) {
  dsm_init_opts init{};
  init.socket_path = socket.c_str();
  if (dsm_init(&init) != DSM_OK) return 20;
  const void* p = nullptr;
  if (dsm_attach("free/last", 30000, &p, nullptr) != DSM_OK) return 21;
  if (dsm_wait_version(p, 1, 30000) != DSM_OK) return 22;
  b->reader_has_first = true;
  b->reader_wait_rc = dsm_wait_version(p, kLastVersion, 10000);
  b->reader_version = dsm_version(p);
  const auto* words = static_cast<const uint64_t*>(p);
  for (size_t i = 0; i < kWords; ++i) b->reader_torn += words[i] != b->reader_version;
  b->reader_done = true;
  dsm_fini();
  return 0;
}

TEST(WriterFree, LastVersionsReachOtherHostsBeforeTheAreaGoes) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  Shared<Board> b;
  const pid_t writer = Spawn([&] { return Writer(cluster.socket(1), &*b); });
  const pid_t reader = Spawn([&] { return Reader(cluster.socket(2), &*b); });
  EXPECT_EQ(Reap(reader, 60000), 0);
  EXPECT_EQ(Reap(writer, 60000), 0);
  EXPECT_EQ(b->reader_wait_rc, DSM_OK);
  EXPECT_EQ(b->reader_version, kLastVersion);
  EXPECT_EQ(b->reader_torn, 0u);
  EXPECT_LT(b->free_ms, 2000.0) << "dsm_free waited its whole bound";
  std::printf("dsm_free waited %.1f ms for host 2 to hold version %lu\n", b->free_ms,
              static_cast<unsigned long>(kLastVersion));
}

}  // namespace
}  // namespace dsm::testing
