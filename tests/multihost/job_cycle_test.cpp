// Jobs come and go on a cluster (issue: replicas of freed areas stayed on
// reader hosts forever, until their regions were full). Each job, on a fresh
// name: a writer on host 1 allocates a 64 MiB area, publishes it, and frees it
// once readers on hosts 2 and 3 attached it and found the writer's content
// (XXH3); then every host's region use must return to what it was before the
// job, and no host may list the area any more. An attach onto a region that
// is full must fail within a second, with DSM_ERR_NO_SPACE and a message that
// names --region-size, and work once the region has room again.
//   DSM_JOBS jobs (default 10; the soak suite runs 100).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dsm/dsm.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/dsm_helpers.h"
#include "tests/support/env.h"
#include "tests/support/process_group.h"

namespace dsm::testing {
namespace {

constexpr size_t kAreaBytes = size_t{64} << 20;
constexpr int kReaders = 2;  // on hosts 2 and 3
constexpr int kAttachTimeoutMs = 60000;
// How long region use may take to come back after a job: the writer's free
// waits for the readers' acks; reader hosts retire the replica at the next
// directory round (DirectoryRounds) and release it once its readers left.
constexpr int kReclaimMs = 10000;

struct JobBoard {
  std::atomic<int> readers_done{0};
  uint64_t writer_hash = 0;
  std::atomic<bool> published{false};
  int attach_rc[kReaders] = {};
  bool hash_ok[kReaders] = {};
};

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  return x ^ (x >> 27);
}

bool Init(const std::string& socket) {
  dsm_init_opts init{};
  init.socket_path = socket.c_str();
  return dsm_init(&init) == DSM_OK;
}

int Writer(const std::string& socket, const std::string& name, uint64_t seed, JobBoard* b) {
  if (!Init(socket)) return 10;
  void* p = nullptr;
  if (dsm_alloc(name.c_str(), kAreaBytes, nullptr, &p) != DSM_OK) return 11;
  auto* words = static_cast<uint64_t*>(p);
  for (size_t i = 0; i < kAreaBytes / 8; ++i) words[i] = Mix(seed * 0x100000001ULL + i);
  dsm_log(p, kAreaBytes);
  if (PublishRetrying(p) != DSM_OK) return 12;
  b->writer_hash = XXH3_64bits(p, kAreaBytes);
  b->published = true;
  WaitFor([&] { return b->readers_done.load() >= kReaders; }, kAttachTimeoutMs + 10000);
  if (dsm_free(p) != DSM_OK) return 13;
  return dsm_fini() == DSM_OK ? 0 : 14;
}

int Reader(const std::string& socket, const std::string& name, int id, JobBoard* b) {
  if (!Init(socket)) return 20;
  const void* p = nullptr;
  size_t size = 0;
  b->attach_rc[id] = dsm_attach(name.c_str(), kAttachTimeoutMs, &p, &size);
  int rc = 0;
  if (b->attach_rc[id] != DSM_OK || size != kAreaBytes) {
    rc = 21;
  } else if (!WaitFor([&] { return b->published.load(); }, kAttachTimeoutMs) ||
             dsm_wait_version(p, 1, kAttachTimeoutMs) != DSM_OK) {
    rc = 22;
  } else {
    b->hash_ok[id] = XXH3_64bits(p, kAreaBytes) == b->writer_hash;
  }
  ++b->readers_done;
  return dsm_fini() == DSM_OK ? rc : 23;
}

// The host's own entry in its dsmctl listing: region bytes in use (-1: no answer).
int64_t RegionUsed(const VirtualCluster& c, int host) {
  const nlohmann::json ctl = c.Dsmctl(host);
  if (!ctl.is_object() || !ctl.contains("hosts")) return -1;
  for (const auto& h : ctl["hosts"]) {
    if (h.value("self", false)) return h["region_used_bytes"].get<int64_t>();
  }
  return -1;
}

bool ListsArea(const VirtualCluster& c, int host, const std::string& name) {
  const nlohmann::json ctl = c.Dsmctl(host);
  if (!ctl.is_object() || !ctl.contains("areas")) return true;  // no answer: not known to be gone
  for (const auto& a : ctl["areas"]) {
    if (a["name"] == name) return true;
  }
  return false;
}

TEST(JobCycle, RegionUseReturnsToItsStartAfterEveryJob) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  const int jobs = static_cast<int>(EnvOr("DSM_JOBS", 10));
  VirtualCluster cluster(3);
  ASSERT_TRUE(cluster.ok()) << "scripts/cluster.sh up 3 failed";
  int64_t start[4] = {};
  for (int h = 1; h <= 3; ++h) {
    start[h] = RegionUsed(cluster, h);
    ASSERT_GE(start[h], 0) << "no dsmctl answer from host " << h;
  }
  const auto t0 = std::chrono::steady_clock::now();
  double slowest_reclaim_ms = 0;
  for (int job = 1; job <= jobs; ++job) {
    SCOPED_TRACE("job " + std::to_string(job) + " of " + std::to_string(jobs));
    const std::string name = "job/" + std::to_string(job);
    Shared<JobBoard> b;
    ProcessGroup procs([] {});
    const pid_t writer =
        procs.Start([&] { return Writer(cluster.socket(1), name, job, &*b); });
    pid_t readers[kReaders];
    for (int i = 0; i < kReaders; ++i) {
      readers[i] = procs.Start([&, i] { return Reader(cluster.socket(2 + i), name, i, &*b); });
    }
    for (int i = 0; i < kReaders; ++i) {
      EXPECT_EQ(procs.Finish(readers[i], kAttachTimeoutMs * 2 + 10000), 0)
          << "reader on host " << 2 + i << " (20 init, 21 attach rc " << b->attach_rc[i]
          << ", 22 no version, 23 fini)";
      EXPECT_TRUE(b->hash_ok[i]) << "reader on host " << 2 + i << " saw other content";
    }
    EXPECT_EQ(procs.Finish(writer, kAttachTimeoutMs + 30000), 0)
        << "writer (10 init, 11 alloc, 12 publish, 13 free, 14 fini)";
    const auto freed = std::chrono::steady_clock::now();
    const bool reclaimed = WaitFor(
        [&] {
          for (int h = 1; h <= 3; ++h) {
            if (RegionUsed(cluster, h) != start[h] || ListsArea(cluster, h, name)) return false;
          }
          return true;
        },
        kReclaimMs);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - freed).count();
    slowest_reclaim_ms = std::max(slowest_reclaim_ms, ms);
    for (int h = 1; h <= 3 && !reclaimed; ++h) {
      ADD_FAILURE() << "host " << h << " after the job: region use " << RegionUsed(cluster, h)
                    << " bytes (started at " << start[h] << "), lists the area: "
                    << ListsArea(cluster, h, name);
    }
    if (HasFailure()) return;
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d jobs of 64 MiB on 3 hosts in %.1f s; region use back at its start after each, "
              "at most %.0f ms after the writer exited\n",
              jobs, s, slowest_reclaim_ms);
}

TEST(JobCycle, AnAttachOntoAFullRegionFailsWithinASecondAndWorksOnceThereIsRoom) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(3, {"--region-size", "512M"});
  ASSERT_TRUE(cluster.ok()) << "scripts/cluster.sh up 3 failed";
  Shared<JobBoard> b;
  struct Filler {
    std::atomic<bool> full{false};
    std::atomic<bool> release{false};
    int areas = 0;
  };
  Shared<Filler> fill;
  struct AttachResult {
    int rc = 0;
    int64_t ms = 0;
    char message[512] = {};
  };
  Shared<AttachResult> result;
  ProcessGroup procs([&] { fill->release = true; });
  const std::string name = "job/full";
  const pid_t writer = procs.Start([&] { return Writer(cluster.socket(1), name, 7, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->published.load(); }, kAttachTimeoutMs));
  // Host 2's region is filled with local areas (of 16 MiB) until one more
  // does not fit; they stay until released.
  const pid_t filler = procs.Start([&] {
    if (!Init(cluster.socket(2))) return 30;
    std::vector<void*> held;
    for (int i = 0; i < 64; ++i) {
      void* p = nullptr;
      const int rc = dsm_alloc(("job/fill-" + std::to_string(i)).c_str(), 16u << 20, nullptr, &p);
      if (rc == DSM_ERR_NO_SPACE) break;
      if (rc != DSM_OK) return 31;
      held.push_back(p);
    }
    fill->areas = static_cast<int>(held.size());
    fill->full = true;
    WaitFor([&] { return fill->release.load(); }, 120000);
    for (void* p : held) dsm_free(p);
    return dsm_fini() == DSM_OK ? 0 : 32;
  });
  ASSERT_TRUE(WaitFor([&] { return fill->full.load(); }, 60000)) << "host 2 never filled";
  ASSERT_GT(fill->areas, 0);
  const auto attach = [&] {
    if (!Init(cluster.socket(2))) return 40;
    const void* p = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    result->rc = dsm_attach(name.c_str(), 10000, &p, nullptr);
    result->ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
    std::snprintf(result->message, sizeof(result->message), "%s", dsm_last_error());
    if (result->rc == DSM_OK && dsm_wait_version(p, 1, kAttachTimeoutMs) == DSM_OK) {
      b->hash_ok[0] = XXH3_64bits(p, kAreaBytes) == b->writer_hash;
    }
    dsm_fini();
    return 0;
  };
  EXPECT_EQ(procs.Finish(procs.Start(attach), 30000), 0);
  EXPECT_EQ(result->rc, DSM_ERR_NO_SPACE);
  EXPECT_LT(result->ms, 1000) << "refused only after " << result->ms << " ms";
  EXPECT_NE(std::string(result->message).find("--region-size"), std::string::npos)
      << "the message does not say what to raise: " << result->message;
  std::printf("full region (%d local areas of 16 MiB on host 2): attach refused in %lld ms: %s\n",
              fill->areas, static_cast<long long>(result->ms), result->message);
  // Room again: the same attach now works and finds the writer's content.
  fill->release = true;
  EXPECT_EQ(procs.Finish(filler, 30000), 0);
  EXPECT_EQ(procs.Finish(procs.Start(attach), kAttachTimeoutMs + 30000), 0);
  EXPECT_EQ(result->rc, DSM_OK) << result->message;
  EXPECT_TRUE(b->hash_ok[0]);
  b->readers_done = kReaders;
  EXPECT_EQ(procs.Finish(writer, 30000), 0);
}

}  // namespace
}  // namespace dsm::testing
