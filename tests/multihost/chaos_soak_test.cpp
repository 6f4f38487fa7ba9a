// Soak (suite 'soak'): three hosts replicate while the network loses,
// duplicates, reorders and corrupts frames, and the reader hosts' daemons are
// stopped for a while (host 2: marked down when longer than 500 ms) or killed
// and restarted (host 3), at random. The reader on host 2 stays attached
// throughout: every snapshot it sees must be one complete version, versions
// only increase, and it ends on the writer's last version, byte for byte.
// After each restart, host 3 must serve a version at least as new as the
// writer's at that moment, complete.
//   DSM_SOAK_SECONDS (default 40) of chaos, DSM_SOAK_SEED (default 1).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/multihost/replication_workload.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/env.h"
#include "tests/support/process_group.h"

namespace dsm::testing {
namespace {

struct Tally {
  int pauses = 0;
  int long_pauses = 0;  // past the 500 ms after which a host may be marked down
  int restarts = 0;
};

TEST(ChaosSoak, ReplicasStayCompleteAndEndEqualThroughFaultsPausesAndRestarts) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  const uint64_t seconds = EnvOr("DSM_SOAK_SECONDS", 40);
  const uint64_t seed = EnvOr("DSM_SOAK_SEED", 1);
  VirtualCluster cluster(3, {"--fault-drop", "0.01", "--fault-duplicate", "0.01", "--fault-reorder",
                             "0.01", "--fault-corrupt", "0.002", "--fault-seed", std::to_string(seed)});
  ASSERT_TRUE(cluster.ok());
  WorkloadOptions o;
  o.versions = UINT64_MAX / 2;  // until the test says stop
  o.readers = 1;
  // It sleeps in dsm_wait_version between versions: host 2's daemon writes
  // versions in place into the buffer it maps, and is stopped in the middle
  // of that at times (the reader then waits: it must not go back).
  o.waiting_readers = 1;
  o.reader_timeout_s = static_cast<int>(seconds) + 120;
  Shared<WorkloadBoard> b;
  b->writer_hold = true;  // the writer stays (its area live) until the last check
  // Whatever way the test ends, the writer stops publishing and leaves.
  ProcessGroup procs([&] {
    b->writer_stop = true;
    b->writer_hold = false;
    b->writer_may_exit = true;
  });
  const pid_t writer = procs.Start([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));
  const pid_t reader = procs.Start([&] { return RunReader(cluster.socket(2), 0, o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->writer_version.load() >= 20; }, 30000));

  std::mt19937_64 rng(seed);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Tally tally;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end && !HasFailure()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pick(200, 1500)));
    if (pick(0, 2) < 2) {
      // Host 2's daemon stops for a while; its reader waits, attached.
      const int stopped_ms = procs.Pause(cluster.DaemonPid(2), pick(50, 1500));
      EXPECT_GE(stopped_ms, 0) << "cannot stop host 2's daemon";
      ++tally.pauses;
      tally.long_pauses += stopped_ms > 500;
    } else {
      // Host 3's daemon dies and comes back; it must catch up from nothing.
      const int pid = cluster.DaemonPid(3);
      EXPECT_GT(pid, 0);
      if (pid <= 0 || kill(pid, SIGKILL) != 0) break;
      EXPECT_TRUE(WaitFor([&] { return kill(pid, 0) != 0; }, 5000));
      EXPECT_TRUE(cluster.StartDaemon(3));
      ++tally.restarts;
      const uint64_t want = b->writer_version.load();
      const pid_t check = procs.Start([&] {
        uint64_t seen = 0;
        return AttachAndCheck(cluster.socket(3), want, o.area_bytes, &seen);
      });
      EXPECT_EQ(procs.Finish(check, 60000), 0)
          << "host 3 after restart " << tally.restarts << " (wanted version " << want << ")";
    }
  }
  b->writer_stop = true;
  EXPECT_EQ(procs.Finish(reader, (static_cast<int>(seconds) + 150) * 1000), 0);
  const uint64_t last = b->writer_version.load();
  const pid_t final_check = procs.Start([&] {
    uint64_t seen = 0;
    return AttachAndCheck(cluster.socket(3), last, o.area_bytes, &seen);
  });
  EXPECT_EQ(procs.Finish(final_check, 60000), 0) << "host 3 never served the writer's last version " << last;
  b->writer_hold = false;
  b->writer_may_exit = true;
  EXPECT_EQ(procs.Finish(writer, 60000), 0);

  std::printf("chaos soak: %llu s, seed %llu: %d pauses of host 2 (%d past 500 ms), %d restarts of host 3; "
              "writer's last version %llu\n",
              static_cast<unsigned long long>(seconds), static_cast<unsigned long long>(seed), tally.pauses,
              tally.long_pauses, tally.restarts, static_cast<unsigned long long>(last));
  const ReaderReport& r = b->readers[0];
  EXPECT_EQ(r.torn, 0u) << "a snapshot that was not one complete version";
  EXPECT_EQ(r.backwards, 0u);
  EXPECT_EQ(r.list_sum, b->list_sum);
  EXPECT_EQ(r.final_version, last);
  EXPECT_EQ(r.final_hash, b->writer_hash);
  EXPECT_GT(tally.pauses + tally.restarts, 0);
}

// Frames whose lines are read in place from the buffer dsmd pins wait in the
// transport while the peer's ring is full (its daemon stopped for a moment,
// shorter than the 50 ms after which they are dropped). The writer wants that
// buffer back meanwhile: dsmd must not let go of it before those frames are
// sent, or they carry lines of a later version under the checksum of the
// earlier one. Memif links, every line changed in every version (so frames
// carry their lines in place), short pauses of host 2's daemon at random.
TEST(ChaosSoak, FramesQueuedBehindAPausedPeerCarryTheBytesTheyWereFramedWith) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  const uint64_t seconds = std::max<uint64_t>(5, EnvOr("DSM_SOAK_SECONDS", 40) / 3);
  const uint64_t seed = EnvOr("DSM_SOAK_SEED", 1);
  VirtualCluster cluster(2, {}, "--device memif");
  ASSERT_TRUE(cluster.ok());
  WorkloadOptions o;
  o.versions = UINT64_MAX / 2;
  o.readers = 1;
  o.area_bytes = 4u << 20;
  o.dirty_fraction = 1.0;
  o.pause_us = 0;
  o.reader_timeout_s = static_cast<int>(seconds) + 120;
  Shared<WorkloadBoard> b;
  // Whatever way the test ends, the writer stops publishing and leaves.
  ProcessGroup procs([&] {
    b->writer_stop = true;
    b->writer_hold = false;
    b->writer_may_exit = true;
  });
  const pid_t writer = procs.Start([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));
  const pid_t reader = procs.Start([&] { return RunReader(cluster.socket(2), 0, o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->writer_version.load() >= 5; }, 30000));
  std::mt19937_64 rng(seed);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int pauses = 0;
  int short_pauses = 0;  // stopped for less than the 50 ms after which queued frames are dropped
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pick(20, 200)));
    const int stopped_ms = procs.Pause(cluster.DaemonPid(2), pick(2, 40));
    ASSERT_GE(stopped_ms, 0) << "cannot stop host 2's daemon";
    ++pauses;
    short_pauses += stopped_ms < 45;
  }
  b->writer_stop = true;
  EXPECT_EQ(procs.Finish(reader, (static_cast<int>(seconds) + 150) * 1000), 0);
  b->writer_may_exit = true;
  EXPECT_EQ(procs.Finish(writer, 60000), 0);
  const auto c1 = cluster.Dsmctl(1);
  const auto c2 = cluster.Dsmctl(2);
  ASSERT_TRUE(c1.is_object() && c2.is_object());
  std::printf("queued tails soak: %llu s, %d pauses (%d under 45 ms); writer's last version %llu; host 1 "
              "tx_tail_frames %llu tx_dropped %llu; host 2 bad_checksum %llu\n",
              static_cast<unsigned long long>(seconds), pauses, short_pauses,
              static_cast<unsigned long long>(b->writer_version.load()),
              static_cast<unsigned long long>(c1["counters"]["tx_tail_frames"].get<uint64_t>()),
              static_cast<unsigned long long>(c1["counters"]["tx_dropped"].get<uint64_t>()),
              static_cast<unsigned long long>(c2["counters"]["dropped"]["bad_checksum"].get<uint64_t>()));
  // Most pauses must be short enough for frames to wait rather than be dropped.
  EXPECT_GE(short_pauses, pauses / 2);
  EXPECT_GT(c1["counters"]["tx_tail_frames"].get<uint64_t>(), 0u);
  EXPECT_EQ(c2["counters"]["dropped"]["bad_checksum"].get<uint64_t>(), 0u)
      << "frames sent with lines changed after they were framed";
  const ReaderReport& r = b->readers[0];
  EXPECT_EQ(r.torn, 0u);
  EXPECT_EQ(r.final_version, b->writer_version.load());
  EXPECT_EQ(r.final_hash, b->writer_hash);
}

}  // namespace
}  // namespace dsm::testing
