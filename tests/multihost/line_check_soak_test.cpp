// Soak (suite 'soak'): every line of every snapshot a remote reader sees is
// what the writer wrote up to the step the snapshot is stamped with. Three
// hosts on af_packet; a writer on host 1 changes 1% of the lines of an area (a
// seeded random set each step) every 2 ms with dsm_log and publishes once per
// step, a refused (busy) publish riding with the next one, as a training loop
// does; a reader on each of hosts 2 and 3 replays the writer's choices and
// checks whole snapshots. A version missing some of the lines changed since the
// last one shows up here as lines holding older writes (or, once replicas
// diverge, bytes no version had) even where the final content ends equal.
// A third case stalls the writer and host 1's daemon as a loaded host would.
//   DSM_SOAK_RUNS (default 1) runs of each case, run i with seed
//   DSM_SOAK_SEED + i (default 1); DSM_LINECHECK_STEPS steps per run (default
//   3000 for 16 MiB, 1000 for 64 MiB, 5000 with stalls).
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

// One run on a fresh cluster (as a job would start).
void RunOnce(const Options& o, bool stall, int run, int runs, bool* passed) {
  const std::string repro = "reproduce with DSM_SOAK_SEED=" + std::to_string(o.seed) +
                            " DSM_SOAK_RUNS=1 DSM_LINECHECK_STEPS=" + std::to_string(o.steps) +
                            " (area " + std::to_string(o.area_bytes >> 20) + " MiB)";
  *passed = false;
  VirtualCluster cluster(3);
  ASSERT_TRUE(cluster.ok()) << "scripts/cluster.sh up 3 failed";
  const std::string label = std::to_string(o.area_bytes >> 20) + " MiB run " +
                            std::to_string(run + 1) + "/" + std::to_string(runs) + " seed " +
                            std::to_string(o.seed);
  RunResult result;
  RunOnCluster(cluster, o, stall, label, repro, &result);
  *passed = result.passed;
}

void RunSoak(size_t area_bytes, uint64_t default_steps, bool stall = false) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  const int runs = static_cast<int>(EnvOr("DSM_SOAK_RUNS", 1));
  const uint64_t base_seed = EnvOr("DSM_SOAK_SEED", 1);
  Options o;
  o.area_bytes = area_bytes;
  o.steps = std::max<uint64_t>(1, EnvOr("DSM_LINECHECK_STEPS", default_steps));
  // Generous: readers on a loaded machine fall behind while they check, but
  // must end on the final version well within this.
  o.reader_timeout_s = static_cast<int>(o.steps * o.period_us * 4 / 1000000) + 90;
  std::vector<uint64_t> failed;
  for (int run = 0; run < runs; ++run) {
    o.seed = base_seed + static_cast<uint64_t>(run);
    o.area_name = "lc/area-" + std::to_string(o.seed);
    bool passed = false;
    RunOnce(o, stall, run, runs, &passed);
    if (!passed) failed.push_back(o.seed);
  }
  std::string seeds;
  for (uint64_t s : failed) seeds += " " + std::to_string(s);
  std::printf("line check %zu MiB: %zu of %d runs failed%s%s\n", area_bytes >> 20, failed.size(),
              runs, failed.empty() ? "" : "; seeds:", seeds.c_str());
}

TEST(LineCheckSoak, EveryLineOfEverySnapshotIsTheWritersSixteenMiB) { RunSoak(16u << 20, 3000); }

TEST(LineCheckSoak, EveryLineOfEverySnapshotIsTheWritersSixtyFourMiB) { RunSoak(64u << 20, 1000); }

// The same on a loaded host: the writer is descheduled inside a publish for
// longer than dsmd waits for it (SyncParams::export_wait_ns), then dsmd is
// while the writer finishes that publish and goes on. The lines of the export
// log dsmd flipped away from before giving up must still go with the next
// version it ships.
TEST(LineCheckSoak, EveryLineOfEverySnapshotIsTheWritersWhileTheWriterStalls) {
  RunSoak(16u << 20, 5000, /*stall=*/true);
}

}  // namespace
}  // namespace dsm::testing::line_check
