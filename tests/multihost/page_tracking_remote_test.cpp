// Page tracking across hosts: a writer on host 1 changes its area with plain
// stores only (memcpy, std::sort, std::fill, a loop; no dsm_log); readers on
// hosts 2 and 3 check every version they see against the writer's hash of that
// version and end byte-for-byte equal. Rewriting the whole area with its own
// bytes then makes no version and puts no DATA frame on the wire. Both
// mechanisms: userfaultfd WP_ASYNC and the mprotect fallback.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "dsm/dsm.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/dsm_helpers.h"
#include "tests/support/plain_stores.h"

namespace dsm::testing {
namespace {

constexpr size_t kAreaBytes = 2u << 20;
constexpr uint64_t kVersions = 150;
constexpr int kReaders = 2;

struct Board {
  std::atomic<uint64_t> hash[kVersions + 1];
  std::atomic<int> attached{0};
  std::atomic<bool> writer_done{false};
  std::atomic<bool> rewrite_go{false};
  std::atomic<bool> rewrite_done{false};
  std::atomic<int> caught_up{0};  // readers that saw the last version
  std::atomic<int> readers_done{0};
  uint64_t writer_hash = 0;
  uint64_t version_after_rewrite = 0;
  struct {
    uint64_t checked = 0;
    uint64_t mismatched = 0;
    uint64_t final_version = 0;
    uint64_t final_hash = 0;
  } readers[kReaders];
};

int Writer(const std::string& socket, int tracker, Board* b) {
  dsm_init_opts init{};
  init.socket_path = socket.c_str();
  if (dsm_init(&init) != DSM_OK) return 10;
  dsm_alloc_opts opts{};
  opts.tracking = DSM_TRACK_PAGES;
  opts.page_tracker = static_cast<uint32_t>(tracker);
  opts.reader_buffers = 3;
  void* p = nullptr;
  if (dsm_alloc("remote/pages", kAreaBytes, &opts, &p) != DSM_OK) return 11;
  auto* area = static_cast<uint8_t*>(p);
  if (!WaitFor([&] { return b->attached.load() == kReaders; }, 30000)) return 12;
  std::mt19937_64 rng(11);
  for (uint64_t v = 1; v <= kVersions; ++v) {
    PlainStoreMutation(area, kAreaBytes, v, rng);
    b->hash[v].store(XXH3_64bits(area, kAreaBytes));
    if (PublishRetrying(p) != DSM_OK || dsm_version(p) != v) return 13;
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  b->writer_hash = XXH3_64bits(area, kAreaBytes);
  b->writer_done = true;
  // The test reads host 1's counters, then lets us rewrite equal bytes.
  if (!WaitFor([&] { return b->rewrite_go.load(); }, 120000)) return 14;
  std::vector<uint8_t> copy(area, area + kAreaBytes);
  std::memcpy(area, copy.data(), kAreaBytes);
  if (PublishRetrying(p) != DSM_OK) return 15;
  b->version_after_rewrite = dsm_version(p);
  b->rewrite_done = true;
  WaitFor([&] { return b->readers_done.load() == kReaders; }, 30000);
  dsm_fini();
  return 0;
}

int Reader(const std::string& socket, int id, Board* b) {
  dsm_init_opts init{};
  init.socket_path = socket.c_str();
  if (dsm_init(&init) != DSM_OK) return 20;
  const void* p = nullptr;
  if (dsm_attach("remote/pages", 30000, &p, nullptr) != DSM_OK) return 21;
  ++b->attached;
  auto& r = b->readers[id];
  uint64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v != last && v != 0 && v <= kVersions) {
      ++r.checked;
      if (XXH3_64bits(p, kAreaBytes) != b->hash[v].load()) ++r.mismatched;
    }
    last = v;
    if (b->writer_done && v == kVersions) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ++b->caught_up;
  WaitFor([&] { return b->rewrite_done.load(); }, 60000);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  dsm_service();
  r.final_version = dsm_version(p);
  r.final_hash = XXH3_64bits(p, kAreaBytes);
  ++b->readers_done;
  dsm_fini();
  return 0;
}

class RemotePageTracking : public ::testing::TestWithParam<int> {};

TEST_P(RemotePageTracking, PlainStoresReachOtherHostsAndEqualBytesSendNothing) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(3);
  ASSERT_TRUE(cluster.ok());
  Shared<Board> b;
  const int tracker = GetParam();
  const pid_t writer = Spawn([&] { return Writer(cluster.socket(1), tracker, &*b); });
  pid_t readers[kReaders];
  for (int i = 0; i < kReaders; ++i) {
    readers[i] = Spawn([&, i] { return Reader(cluster.socket(2 + i), i, &*b); });
  }
  ASSERT_TRUE(WaitFor([&] { return b->writer_done.load(); }, 120000));
  // Let the last version reach both hosts, then count DATA frames around the
  // equal-bytes rewrite.
  ASSERT_TRUE(WaitFor([&] { return b->caught_up.load() == kReaders; }, 60000));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // last acks settle
  const auto before = cluster.Dsmctl(1);
  const uint64_t frames_before = before["counters"]["data_frames_out"].get<uint64_t>();
  // dsmctl on the writer's host names the mechanism and counts what it found.
  bool listed = false;
  for (const auto& a : before["areas"]) {
    if (a["name"] != "remote/pages" || a["replica"].get<bool>()) continue;
    listed = true;
    EXPECT_EQ(a["tracking"], "pages");
    EXPECT_EQ(a["page_tracker"], dsm_page_tracker_name(tracker));
    EXPECT_GT(a["lines_changed"].get<uint64_t>(), 0u);
    EXPECT_GE(a["pages_written"].get<uint64_t>() * 64, a["lines_changed"].get<uint64_t>());
  }
  EXPECT_TRUE(listed);
  b->rewrite_go = true;
  ASSERT_TRUE(WaitFor([&] { return b->rewrite_done.load(); }, 30000));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const uint64_t frames_after = cluster.Dsmctl(1)["counters"]["data_frames_out"].get<uint64_t>();

  for (pid_t r : readers) EXPECT_EQ(Reap(r, 120000), 0);
  EXPECT_EQ(Reap(writer, 60000), 0);
  EXPECT_EQ(frames_after, frames_before) << "rewriting equal bytes put DATA frames on the wire";
  EXPECT_EQ(b->version_after_rewrite, kVersions);
  for (int i = 0; i < kReaders; ++i) {
    SCOPED_TRACE("reader on host " + std::to_string(2 + i));
    EXPECT_GT(b->readers[i].checked, 5u);
    EXPECT_EQ(b->readers[i].mismatched, 0u);
    EXPECT_EQ(b->readers[i].final_version, kVersions);
    EXPECT_EQ(b->readers[i].final_hash, b->writer_hash);
  }
  std::printf("readers checked %lu and %lu versions against the writer's hashes\n",
              static_cast<unsigned long>(b->readers[0].checked),
              static_cast<unsigned long>(b->readers[1].checked));
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, RemotePageTracking,
                         ::testing::Values(DSM_PAGE_TRACKER_UFFD, DSM_PAGE_TRACKER_MPROTECT),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == DSM_PAGE_TRACKER_UFFD ? "Uffd"
                                                                                  : "Mprotect");
                         });

}  // namespace
}  // namespace dsm::testing
