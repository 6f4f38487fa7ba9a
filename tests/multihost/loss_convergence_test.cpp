// Replication converges under loss for big areas (multihost suite): three
// hosts whose daemons drop, duplicate and reorder 5% of the frames they send
// and corrupt 1%; a writer on host 1 changes 1% or 100% of the lines of a 1,
// 16 or 64 MiB area every 2 ms (as fast as it can where a step takes longer),
// and readers on hosts 2 and 3 attach while it does. Each reader's first
// version must arrive (by repairing what the lossy first transfer missed,
// while the writer moves on), every snapshot it sees must be a version the
// writer published, checked line by line, and it must end on the writer's last
// version byte for byte (XXH3). Prints, per case, the time to the first
// version (dsm_attach) and to catch up after the writer's last publish, as a
// watcher process beside each reader saw them.
//   DSM_SOAK_RUNS (default 1) runs of each case, seeds DSM_SOAK_SEED + i.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/multihost/line_check_run.h"
#include "tests/multihost/line_check_workload.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/env.h"

namespace dsm::testing::line_check {
namespace {

// The fault mix of the issue that found the failure, injected by every dsmd.
std::vector<std::string> Faults(uint64_t seed) {
  return {"--fault-drop", "0.05", "--fault-duplicate", "0.05", "--fault-reorder", "0.05",
          "--fault-corrupt", "0.01", "--fault-seed", std::to_string(seed)};
}

struct Case {
  size_t mib;
  double fraction;
};

// Steps per case: enough for readers to join mid-stream and the writer to
// keep changing the area through their first transfer.
uint64_t StepsFor(const Case& c) { return c.fraction >= 1.0 ? 40 : 1000; }
uint64_t JoinAt(const Case& c) { return c.fraction >= 1.0 ? 5 : 100; }

void RunDevice(const std::string& device) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  const int runs = static_cast<int>(EnvOr("DSM_SOAK_RUNS", 1));
  const uint64_t base_seed = EnvOr("DSM_SOAK_SEED", 1);
  const Case cases[] = {{1, 0.01}, {16, 0.01}, {64, 0.01}, {1, 1.0}, {16, 1.0}, {64, 1.0}};
  struct Row {
    Case c;
    std::vector<double> first, catch_up;  // every run's, both readers
    int failed = 0;
  };
  std::vector<Row> rows;
  for (const Case& c : cases) rows.push_back(Row{c, {}, {}, 0});
  for (int run = 0; run < runs; ++run) {
    const uint64_t seed = base_seed + static_cast<uint64_t>(run);
    VirtualCluster cluster(3, Faults(seed), "--device " + device);
    ASSERT_TRUE(cluster.ok()) << "scripts/cluster.sh up 3 --device " << device << " failed";
    for (Row& row : rows) {
      Options o;
      o.seed = seed;
      o.area_bytes = row.c.mib << 20;
      o.dirty_fraction = row.c.fraction;
      o.steps = StepsFor(row.c);
      o.readers_join_at_step = JoinAt(row.c);
      o.reader_timeout_s = 120;
      o.watch = true;
      o.area_name = "loss/" + std::to_string(row.c.mib) + "-" +
                    std::to_string(static_cast<int>(row.c.fraction * 100)) + "-" +
                    std::to_string(seed);
      const std::string label = device + " " + std::to_string(row.c.mib) + " MiB f=" +
                                std::to_string(static_cast<int>(row.c.fraction * 100)) +
                                "% seed " + std::to_string(seed);
      const std::string repro = "reproduce with DSM_SOAK_SEED=" + std::to_string(seed) +
                                " DSM_SOAK_RUNS=1 (" + label + ")";
      RunResult r;
      RunOnCluster(cluster, o, /*stall=*/false, label, repro, &r);
      row.failed += r.passed ? 0 : 1;
      for (int i = 0; i < kReaders; ++i) {
        row.first.push_back(r.first_version_s[i]);
        row.catch_up.push_back(r.catch_up_s[i]);
      }
    }
  }
  // Median and largest over every run and reader.
  const auto median_max = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    char text[64];
    std::snprintf(text, sizeof(text), "%.3f (%.3f)", v.empty() ? 0.0 : v[v.size() / 2],
                  v.empty() ? 0.0 : v.back());
    return std::string(text);
  };
  std::printf("\n%s, 5%% drop/duplicate/reorder, 1%% corrupt, %d run(s) x %d readers; median "
              "(largest):\n",
              device.c_str(), runs, kReaders);
  std::printf("| area | lines changed per step | first version (s) | catch-up (s) | failed runs |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    std::printf("| %zu MiB | %d%% | %s | %s | %d |\n", row.c.mib,
                static_cast<int>(row.c.fraction * 100), median_max(row.first).c_str(),
                median_max(row.catch_up).c_str(), row.failed);
  }
  std::fflush(stdout);
}

TEST(LossConvergence, BigAreasReachEveryReaderUnderLossOnMemif) { RunDevice("memif"); }

TEST(LossConvergence, BigAreasReachEveryReaderUnderLossOnAfPacket) { RunDevice("af_packet"); }

}  // namespace
}  // namespace dsm::testing::line_check
