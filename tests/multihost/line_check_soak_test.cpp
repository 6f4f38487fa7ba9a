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
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/multihost/line_check_workload.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/env.h"
#include "tests/support/process_group.h"

namespace dsm::testing::line_check {
namespace {

uint64_t Counter(const nlohmann::json& ctl, const char* name) {
  if (!ctl.is_object() || !ctl.contains("counters")) return 0;
  const auto& c = ctl["counters"];
  return c.contains(name) && c[name].is_number_unsigned() ? c[name].get<uint64_t>() : 0;
}

double Seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

// Failures recorded so far in the running test (to tell which run added some).
int FailedParts() {
  const ::testing::TestResult* r =
      ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int n = 0;
  for (int i = 0; i < r->total_part_count(); ++i) n += r->GetTestPartResult(i).failed() ? 1 : 0;
  return n;
}

// One run on a fresh cluster (as a job would start); *passed says whether it
// added no failure. With `stall`, the writer is stopped now and then inside a
// publish for longer than dsmd waits for a publish to end
// (SyncParams::export_wait_ns, 50 ms), and host 1's daemon is stopped for a
// while as the writer goes on.
void RunOnce(const Options& o, bool stall, int run, int runs, bool* passed) {
  const std::string repro = "reproduce with DSM_SOAK_SEED=" + std::to_string(o.seed) +
                            " DSM_SOAK_RUNS=1 DSM_LINECHECK_STEPS=" + std::to_string(o.steps) +
                            " (area " + std::to_string(o.area_bytes >> 20) + " MiB)";
  SCOPED_TRACE(repro);
  const auto t0 = std::chrono::steady_clock::now();
  VirtualCluster cluster(3);
  *passed = false;
  ASSERT_TRUE(cluster.ok()) << "scripts/cluster.sh up 3 failed";
  Shared<Board> b;
  // Whatever way the run ends, the writer stops stepping and leaves.
  ProcessGroup procs([&] {
    b->writer_stop = true;
    b->writer_may_exit = true;
  });
  const pid_t writer = procs.Start([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000)) << "the writer did not allocate";
  pid_t readers[kReaders];
  for (int i = 0; i < kReaders; ++i) {
    readers[i] = procs.Start([&, i] { return RunReader(cluster.socket(2 + i), i, o, &*b); });
  }
  int stalls = 0;
  int stalls_in_publish = 0;
  if (stall) {
    std::mt19937_64 rng(o.seed);
    const auto pick = [&](int lo, int hi) {
      return std::uniform_int_distribution<int>(lo, hi)(rng);
    };
    // Spins (at most 20 ms) until the writer is in a publish: a few hundred
    // microseconds of its 2 ms.
    const auto writer_publishing = [&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      while (!b->in_publish && !b->writer_done && std::chrono::steady_clock::now() < until) {
      }
      return b->in_publish && !b->writer_done;
    };
    const int daemon = cluster.DaemonPid(1);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(o.reader_timeout_s);
    while (!b->writer_done && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pick(100, 400)));
      if (!writer_publishing()) continue;
      // The writer is descheduled in its publish for longer than dsmd waits
      // for it (dsmd gives up, having flipped the export logs)...
      ASSERT_TRUE(procs.Stop(writer)) << "cannot stop the writer";
      stalls_in_publish += b->in_publish;
      std::this_thread::sleep_for(std::chrono::milliseconds(pick(80, 160)));
      // ...then dsmd is, while the writer finishes that publish and goes on;
      // dsmd gets the core back as the writer is in a publish again, so it
      // gives up once more and flips again with versions in the other log.
      // (Had dsmd run on, it would have seen the first publish end and taken
      // the log it flipped away from: stalls of the writer alone rarely show it.)
      ASSERT_TRUE(procs.Stop(daemon)) << "cannot stop host 1's daemon";
      procs.Continue(writer);
      std::this_thread::sleep_for(std::chrono::milliseconds(pick(20, 80)));
      writer_publishing();
      procs.Continue(daemon);
      ++stalls;
    }
  }
  int reader_rc[kReaders];
  for (int i = 0; i < kReaders; ++i)
    reader_rc[i] = procs.Finish(readers[i], (o.reader_timeout_s + 30) * 1000);
  b->writer_may_exit = true;
  const int writer_rc = procs.Finish(writer, 60000);
  const auto ctl = cluster.Dsmctl(1);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const ReaderReport* r = b->readers;
  std::string readers_line;
  for (int i = 0; i < kReaders; ++i) {
    const ReaderReport& rr = r[i];
    const double ms_each =
        rr.snapshots_checked == 0 ? 0.0 : Seconds(rr.check_ns) * 1e3 / rr.snapshots_checked;
    char text[200];
    std::snprintf(text, sizeof(text), "; host %d checked %llu snapshots (%.1f ms each), %llu wrong",
                  2 + i, static_cast<unsigned long long>(rr.snapshots_checked), ms_each,
                  static_cast<unsigned long long>(rr.mismatching_snapshots));
    readers_line += text;
  }
  std::string stalls_text;
  if (stall) {
    stalls_text = ", " + std::to_string(stalls) + " stalls (" + std::to_string(stalls_in_publish) +
                  " in a publish)";
  }
  std::printf(
      "line check %zu MiB run %d/%d seed %llu: %llu steps in %.1f s, %llu versions, %llu "
      "publishes refused busy%s; host 1 collected %llu versions%s; %.1f s in all\n",
      o.area_bytes >> 20, run + 1, runs, static_cast<unsigned long long>(o.seed),
      static_cast<unsigned long long>(b->writer_step.load()), Seconds(b->writer_ns),
      static_cast<unsigned long long>(b->writer_version.load()),
      static_cast<unsigned long long>(b->busy), stalls_text.c_str(),
      static_cast<unsigned long long>(Counter(ctl, "versions_collected")), readers_line.c_str(),
      took);
  std::fflush(stdout);

  const int failed_before = FailedParts();
  EXPECT_EQ(writer_rc, 0) << "writer exit code (10 init, 11 alloc, 12 readers never attached, 13 "
                             "publish failed, 14 last step never published, 15 fini)";
  EXPECT_EQ(b->writer_step.load(), o.steps);
  for (int i = 0; i < kReaders; ++i) {
    const ReaderReport& rr = r[i];
    SCOPED_TRACE("reader on host " + std::to_string(2 + i));
    EXPECT_EQ(reader_rc[i], 0) << "reader exit code (20 init, 21 attach (rc " << rr.attach_rc
                               << "), 22 fini; negative: killed)";
    EXPECT_FALSE(rr.timed_out) << "never saw the writer's final version "
                               << b->writer_version.load() << " (last seen " << rr.final_version
                               << ")";
    EXPECT_GT(rr.snapshots_checked, 0u);
    EXPECT_EQ(rr.mismatching_snapshots, 0u)
        << rr.mismatching_snapshots << " of " << rr.snapshots_checked
        << " snapshots had wrong lines (" << rr.mismatching_lines << " in all):\n"
        << Describe(rr);
    EXPECT_EQ(rr.backwards_versions, 0u) << "versions went backwards";
    EXPECT_EQ(rr.backwards_steps, 0u) << "a later version was stamped with an earlier step";
    EXPECT_EQ(rr.bad_stamps, 0u) << "line 0 was not a stamp of this run";
    EXPECT_EQ(rr.stamp_version_mismatches, 0u)
        << "a snapshot's stamp named another version than dsm_version";
    EXPECT_EQ(rr.final_version, b->writer_version.load());
    EXPECT_EQ(rr.final_step, o.steps);
    EXPECT_EQ(rr.final_hash, b->writer_hash) << "the final content differs from the writer's";
  }
  *passed = FailedParts() == failed_before;
  if (!*passed) std::printf("run %d failed: %s\n", run + 1, repro.c_str());
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
