// A name its host gives to a new area at once (a job restarts its writer, a
// script runs again) denotes the new area on every other host from that
// host's next listing on: a reader that attaches the name there gets the new
// area, never the replica of the old one that the host still holds, even
// when that replica's version is far ahead of the new area's. Readers that
// attached the old area keep it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "dsm/dsm.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/dsm_helpers.h"

namespace dsm::testing {
namespace {

constexpr size_t kWords = (64u << 10) / 8;
constexpr uint64_t kOldVersions = 30;  // the old area ends far ahead of the new one
constexpr int kRounds = 20;

// The value every word holds at `version` of the area of writer `job`.
uint64_t Word(int job, uint64_t version) { return static_cast<uint64_t>(job) * 1000 + version; }

struct Board {
  std::atomic<int> published_job{-1};  // the job whose writer published its versions
  std::atomic<int> exit_job{-1};       // writers of this job and older exit
};

int Writer(const std::string& socket, int job, uint64_t versions, Board* b) {
  dsm_init_opts init{};
  init.socket_path = socket.c_str();
  if (dsm_init(&init) != DSM_OK) return 10;
  void* p = nullptr;
  // The old writer has gone; its area may still be sealed here a moment.
  if (dsm_alloc("reuse/area", kWords * 8, nullptr, &p) != DSM_OK) return 11;
  auto* words = static_cast<uint64_t*>(p);
  for (uint64_t v = 1; v <= versions; ++v) {
    for (size_t i = 0; i < kWords; ++i) words[i] = Word(job, v);
    dsm_log(p, kWords * 8);
    if (PublishRetrying(p) != DSM_OK) return 12;
  }
  b->published_job = job;
  WaitFor([&] { return b->exit_job.load() >= job; }, 30000);
  dsm_fini();  // without a free: the area is sealed, as when a process ends
  return 0;
}

// Attaches the name on another host; `found_job`: whose area it got.
int Reader(const std::string& socket, uint64_t want, int* found_job, uint64_t* found_version) {
  dsm_init_opts init{};
  init.socket_path = socket.c_str();
  if (dsm_init(&init) != DSM_OK) return 20;
  const void* p = nullptr;
  if (dsm_attach("reuse/area", 30000, &p, nullptr) != DSM_OK) return 21;
  if (dsm_wait_version(p, want, 30000) != DSM_OK) return 22;
  const uint64_t version = dsm_version(p);
  const auto* words = static_cast<const uint64_t*>(p);
  *found_job = static_cast<int>(words[0] / 1000);
  *found_version = version;
  for (size_t i = 0; i < kWords; ++i) {
    if (words[i] != words[0] || words[i] % 1000 != version) return 23;  // torn
  }
  dsm_fini();
  return 0;
}

TEST(NameReuse, OtherHostsAttachTheNewAreaOfAReusedName) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  Shared<Board> b;
  int wrong = 0;
  for (int job = 0; job < kRounds; ++job) {
    // The old area: published and replicated on host 2 (a reader attached it).
    const pid_t old_writer = Spawn([&] { return Writer(cluster.socket(1), 2 * job, kOldVersions, &*b); });
    ASSERT_TRUE(WaitFor([&] { return b->published_job.load() == 2 * job; }, 30000));
    Shared<int> old_job;
    Shared<uint64_t> old_version;
    const pid_t old_reader = Spawn(
        [&] { return Reader(cluster.socket(2), kOldVersions, &*old_job, &*old_version); });
    ASSERT_EQ(Reap(old_reader, 60000), 0);
    ASSERT_EQ(*old_job, 2 * job);
    // Its writer goes; a new writer takes the name at once and publishes version 1.
    b->exit_job = 2 * job;
    ASSERT_EQ(Reap(old_writer, 30000), 0);
    const pid_t new_writer = Spawn([&] { return Writer(cluster.socket(1), 2 * job + 1, 1, &*b); });
    ASSERT_TRUE(WaitFor([&] { return b->published_job.load() == 2 * job + 1; }, 30000));
    Shared<int> new_job;
    Shared<uint64_t> new_version;
    const pid_t new_reader =
        Spawn([&] { return Reader(cluster.socket(2), 1, &*new_job, &*new_version); });
    EXPECT_EQ(Reap(new_reader, 60000), 0);
    if (*new_job != 2 * job + 1) {
      ++wrong;
      ADD_FAILURE() << "round " << job << ": host 2 attached job " << *new_job << "'s area at version "
                    << *new_version << ", not job " << 2 * job + 1 << "'s";
    }
    b->exit_job = 2 * job + 1;
    ASSERT_EQ(Reap(new_writer, 30000), 0);
  }
  std::printf("%d of %d attaches right after the name's reuse got the old area\n", wrong, kRounds);
}

}  // namespace
}  // namespace dsm::testing
