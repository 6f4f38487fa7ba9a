#include "tests/multihost/line_check_run.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "tests/support/child_process.h"
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

// With `stall`, the writer is stopped now and then inside a
// publish for longer than dsmd waits for a publish to end
// (SyncParams::export_wait_ns, 50 ms), and host 1's daemon is stopped for a
// while as the writer goes on.
}  // namespace

void RunOnCluster(VirtualCluster& cluster, const Options& o, bool stall, const std::string& label,
                  const std::string& repro, RunResult* result) {
  SCOPED_TRACE(repro);
  const auto t0 = std::chrono::steady_clock::now();
  *result = RunResult{};
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
  pid_t watchers[kReaders] = {};
  for (int i = 0; i < kReaders && o.watch; ++i) {
    watchers[i] = procs.Start([&, i] { return RunWatcher(cluster.socket(2 + i), i, o, &*b); });
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
  int watcher_rc[kReaders] = {};
  for (int i = 0; i < kReaders && o.watch; ++i)
    watcher_rc[i] = procs.Finish(watchers[i], (o.reader_timeout_s + 30) * 1000);
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
    // A watcher's times are the replica's; a reader's include its checking.
    const bool watched = o.watch && !b->watchers[i].timed_out && b->watchers[i].attach_rc == 0;
    const uint64_t attach_ns = watched ? b->watchers[i].attach_ns : rr.attach_ns;
    const uint64_t catch_up_ns = watched ? b->watchers[i].catch_up_ns : rr.catch_up_ns;
    char text[300];
    std::snprintf(text, sizeof(text),
                  "; host %d: first version in %.3f s, caught up in %.3f s%s, checked %llu "
                  "snapshots (%.1f ms each), %llu wrong",
                  2 + i, Seconds(attach_ns), Seconds(catch_up_ns),
                  watched ? " (watcher)" : "",
                  static_cast<unsigned long long>(rr.snapshots_checked), ms_each,
                  static_cast<unsigned long long>(rr.mismatching_snapshots));
    result->first_version_s[i] = Seconds(attach_ns);
    result->catch_up_s[i] = Seconds(catch_up_ns);
    readers_line += text;
  }
  std::string stalls_text;
  if (stall) {
    stalls_text = ", " + std::to_string(stalls) + " stalls (" + std::to_string(stalls_in_publish) +
                  " in a publish)";
  }
  std::printf(
      "line check %s: %llu steps in %.1f s, %llu versions, %llu "
      "publishes refused busy%s; host 1 collected %llu versions, injected %llu faults%s; %.1f "
      "s in all\n",
      label.c_str(),
      static_cast<unsigned long long>(b->writer_step.load()), Seconds(b->writer_ns),
      static_cast<unsigned long long>(b->writer_version.load()),
      static_cast<unsigned long long>(b->busy), stalls_text.c_str(),
      static_cast<unsigned long long>(Counter(ctl, "versions_collected")),
      static_cast<unsigned long long>(Counter(ctl, "faults_injected")), readers_line.c_str(),
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
                               << "), 22 fini, 23 the writer never reached the joining step; negative: killed)";
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
    if (o.watch) {
      const WatcherReport& w = b->watchers[i];
      EXPECT_EQ(watcher_rc[i], 0) << "watcher exit code (30 init, 31 attach (rc " << w.attach_rc
                                  << "), 32 fini, 33 the writer never reached the joining step)";
      EXPECT_FALSE(w.timed_out) << "the watcher never saw the writer's final version";
    }
  }
  result->passed = FailedParts() == failed_before;
  result->seconds = took;
  if (!result->passed) std::printf("failed: %s\n", repro.c_str());
}


}  // namespace dsm::testing::line_check
