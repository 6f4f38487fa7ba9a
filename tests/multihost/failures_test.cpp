// Hosts failing: a reader host's daemon killed with SIGKILL and restarted
// resyncs to the latest version; a writer host taken down makes its readers
// report the area stale, without crashes, and its writer keeps publishing; a replica freed while its host was
// away never writes into the local area that took its place.
#include <gtest/gtest.h>
#include <signal.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "dsm/dsm.h"
#include "tests/multihost/replication_workload.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"

namespace dsm::testing {
namespace {

void KillAndRestartAReaderHost(const std::string& cluster_args) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(3, {}, cluster_args);
  ASSERT_TRUE(cluster.ok());
  WorkloadOptions o;
  o.versions = 2500;
  o.readers = 1;  // the steady reader on host 3
  Shared<WorkloadBoard> b;
  struct Results {
    uint64_t before = 0;
    uint64_t after = 0;
    uint64_t wanted_after = 0;
  };
  Shared<Results> res;
  const pid_t writer = Spawn([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));
  const pid_t steady = Spawn([&] { return RunReader(cluster.socket(3), 0, o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->writer_version.load() >= 50; }, 20000));

  const pid_t first = Spawn([&] { return AttachAndCheck(cluster.socket(2), 20, o.area_bytes, &res->before); });
  EXPECT_EQ(Reap(first, 60000), 0);
  const int pid = cluster.DaemonPid(2);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return kill(pid, 0) != 0; }, 5000));
  ASSERT_TRUE(cluster.OthersSee(2, false, 5000));
  ASSERT_TRUE(cluster.StartDaemon(2));
  // Both other hosts hear from it again (on memif: host 3's link to it is a
  // client of the restarted daemon's server, and reconnects).
  EXPECT_TRUE(cluster.OthersSee(2, true, 8000));

  res->wanted_after = b->writer_version.load();
  const pid_t second =
      Spawn([&] { return AttachAndCheck(cluster.socket(2), res->wanted_after, o.area_bytes, &res->after); });
  EXPECT_EQ(Reap(second, 60000), 0);
  EXPECT_GE(res->after, res->wanted_after) << "the restarted host caught up with the writer";
  EXPECT_GT(res->after, res->before);

  b->writer_may_exit = true;
  EXPECT_EQ(Reap(steady, 120000), 0);
  EXPECT_EQ(Reap(writer, 120000), 0);
  EXPECT_EQ(b->readers[0].torn, 0u);
  EXPECT_EQ(b->readers[0].final_hash, b->writer_hash);
}

TEST(Failures, AReaderHostsDaemonKilledAndRestartedResyncs) { KillAndRestartAReaderHost(""); }

TEST(Failures, AReaderHostsDaemonKilledAndRestartedResyncsOverMemifLinks) {
  KillAndRestartAReaderHost("--device memif");
}

TEST(Failures, AWriterHostTakenDownMakesReadersReportStale) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  WorkloadOptions o;
  o.versions = 100000;  // until the test stops it
  o.readers = 1;
  Shared<WorkloadBoard> b;
  struct Results {
    std::atomic<bool> fresh_seen{false};
    std::atomic<bool> host_killed{false};
    bool stale_after = false;
    bool writer_alive_after = true;
    uint64_t version_at_kill = 0;
    uint64_t version_after = 0;
    int torn = 0;
  };
  Shared<Results> res;
  const pid_t writer = Spawn([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));
  const pid_t reader = Spawn([&] {
    if (!Init(cluster.socket(2))) return 40;
    const void* p = nullptr;
    if (dsm_attach("mh/area", 20000, &p, nullptr) != DSM_OK) return 41;
    ++b->readers_attached;
    const auto* bytes = static_cast<const uint8_t*>(p);
    dsm_area_status st{};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      dsm_service();
      dsm_status(p, &st);
      if (!res->host_killed && st.version > 20 && !st.stale) res->fresh_seen = true;
      if (res->host_killed && st.stale && !st.writer_alive) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    res->stale_after = st.stale;
    res->writer_alive_after = st.writer_alive;
    res->version_after = st.version;
    Stamp s;
    std::memcpy(&s, bytes, sizeof(s));
    if (st.version > 0 && (s.version != st.version ||
                           s.hash != XXH3_64bits(bytes + 64, o.area_bytes - 64))) {
      ++res->torn;
    }
    return dsm_fini() == DSM_OK ? 0 : 42;
  });
  ASSERT_TRUE(WaitFor([&] { return res->fresh_seen.load(); }, 20000)) << "the reader never saw a fresh version";
  const int pid = cluster.DaemonPid(1);
  ASSERT_GT(pid, 0);
  const uint64_t at_kill = b->writer_version.load();
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  res->host_killed = true;
  // The writer goes on publishing for local readers: the pin dsmd held on the
  // version it was shipping dies with it.
  EXPECT_TRUE(WaitFor([&] { return b->writer_version.load() >= at_kill + 20; }, 10000))
      << "the writer stopped publishing at version " << b->writer_version.load()
      << " when its host's daemon died (killed at " << at_kill << ")";
  EXPECT_EQ(Reap(reader, 60000), 0);
  EXPECT_TRUE(res->stale_after);
  EXPECT_FALSE(res->writer_alive_after);
  EXPECT_EQ(res->torn, 0);
  EXPECT_GT(res->version_after, 20u);
  // Host 2's daemon lived through it and reports host 1 down.
  const auto ctl = cluster.Dsmctl(2);
  ASSERT_FALSE(ctl.is_discarded());
  bool host1_down = false;
  for (const auto& h : ctl["hosts"]) host1_down |= h["id"] == 1 && !h["up"].get<bool>();
  EXPECT_TRUE(host1_down);
  kill(writer, SIGKILL);
  Reap(writer, 10000);
}

// A reader host that goes silent (its daemon stopped, as a host cut off by
// the network would be) is marked down by the writer's host, which then sends
// it nothing; when it is heard from again, it gets what it missed and its
// replica ends equal to the writer's.
TEST(Failures, AReaderHostThatGoesSilentIsSentNothingUntilItIsBackThenCatchesUp) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  WorkloadOptions o;
  o.versions = 2500;
  o.readers = 1;
  Shared<WorkloadBoard> b;
  const pid_t writer = Spawn([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));
  const pid_t reader = Spawn([&] { return RunReader(cluster.socket(2), 0, o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->writer_version.load() >= 100; }, 20000));
  const int daemon2 = cluster.DaemonPid(2);
  ASSERT_GT(daemon2, 0);
  ASSERT_EQ(kill(daemon2, SIGSTOP), 0);
  const bool marked_down = cluster.OthersSee(2, false, 5000);
  const auto transfers = [&] {
    const auto ctl = cluster.Dsmctl(1);
    return ctl.is_object() ? ctl["counters"]["transfers_sent"].get<uint64_t>() : UINT64_MAX;
  };
  const uint64_t version_down = b->writer_version.load();
  const uint64_t sent_down = transfers();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const uint64_t sent_later = transfers();
  const uint64_t version_later = b->writer_version.load();
  ASSERT_EQ(kill(daemon2, SIGCONT), 0);
  ASSERT_TRUE(marked_down) << "host 1 never marked the stopped host 2 down";
  ASSERT_NE(sent_down, UINT64_MAX) << "dsmctl on host 1 failed";
  ASSERT_NE(sent_later, UINT64_MAX) << "dsmctl on host 1 failed";
  EXPECT_GT(version_later, version_down + 50) << "the writer went on publishing";
  EXPECT_EQ(sent_later, sent_down) << "transfers to a host marked down";
  EXPECT_TRUE(cluster.OthersSee(2, true, 8000));
  // Back up: what it missed goes at once (not when the reader times out).
  EXPECT_TRUE(WaitFor([&] { const uint64_t n = transfers(); return n != UINT64_MAX && n > sent_later; }, 5000))
      << "nothing was sent to the host once it was back";
  EXPECT_EQ(Reap(reader, 120000), 0);
  b->writer_may_exit = true;
  EXPECT_EQ(Reap(writer, 60000), 0);
  const ReaderReport& r = b->readers[0];
  EXPECT_EQ(r.torn, 0u);
  EXPECT_EQ(r.backwards, 0u);
  EXPECT_EQ(r.final_version, o.versions);
  EXPECT_EQ(r.final_hash, b->writer_hash);
}

// Host 1's daemon is stopped (not killed: its areas and subscriptions live on)
// long enough for host 2 to mark it down; the replica there is sealed, and a
// local program takes its name (and its slot). When host 1 resumes, it resends
// what host 2 lacks: those frames must not land in the local area.
TEST(Failures, AReplicaFreedWhileItsHostWasAwayLeavesTheAreaThatTookItsSlotAlone) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  WorkloadOptions o;
  o.versions = 100000;  // until the test stops it
  o.readers = 1;
  Shared<WorkloadBoard> b;
  struct Results {
    std::atomic<bool> replica_done{false};
    std::atomic<bool> local_published{false};
    uint64_t local_version = 0;
    uint64_t seen_version = 0;
    int wrong_bytes = -1;
  };
  Shared<Results> res;
  const pid_t writer = Spawn([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));
  const pid_t reader = Spawn([&] {
    if (!Init(cluster.socket(2))) return 40;
    const void* p = nullptr;
    if (dsm_attach("mh/area", 20000, &p, nullptr) != DSM_OK) return 41;
    ++b->readers_attached;
    if (dsm_wait_version(p, 20, 20000) != DSM_OK) return 42;
    return dsm_fini() == DSM_OK ? 0 : 43;  // the replica has no reader left
  });
  ASSERT_EQ(Reap(reader, 60000), 0);
  const int daemon1 = cluster.DaemonPid(1);
  ASSERT_GT(daemon1, 0);
  ASSERT_EQ(kill(daemon1, SIGSTOP), 0);
  ASSERT_TRUE(cluster.OthersSee(1, false, 10000)) << "host 2 never marked the stopped host 1 down";
  // A local writer on host 2 takes the name: 0x5a everywhere, a few versions.
  const pid_t local = Spawn([&] {
    if (!Init(cluster.socket(2))) return 50;
    void* p = nullptr;
    if (dsm_alloc("mh/area", o.area_bytes, nullptr, &p) != DSM_OK) return 51;
    for (int v = 0; v < 5; ++v) {
      std::memset(p, 0x5a, o.area_bytes);
      dsm_log(p, o.area_bytes);
      if (dsm_publish(p) != DSM_OK) return 52;
    }
    res->local_version = dsm_version(p);
    res->local_published = true;
    WaitFor([&] { return res->replica_done.load(); }, 60000);
    return dsm_fini() == DSM_OK ? 0 : 53;
  });
  ASSERT_TRUE(WaitFor([&] { return res->local_published.load(); }, 20000));
  ASSERT_EQ(kill(daemon1, SIGCONT), 0);
  // Host 1 is back, its writer still publishing: give it time to resend.
  ASSERT_TRUE(cluster.OthersSee(1, true, 10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const pid_t check = Spawn([&] {
    if (!Init(cluster.socket(2))) return 60;
    const void* p = nullptr;
    if (dsm_attach("mh/area", 5000, &p, nullptr) != DSM_OK) return 61;
    res->seen_version = dsm_version(p);
    const auto* bytes = static_cast<const uint8_t*>(p);
    res->wrong_bytes = static_cast<int>(
        std::count_if(bytes, bytes + o.area_bytes, [](uint8_t x) { return x != 0x5a; }));
    return dsm_fini() == DSM_OK ? 0 : 62;
  });
  EXPECT_EQ(Reap(check, 30000), 0);
  res->replica_done = true;
  EXPECT_EQ(Reap(local, 30000), 0);
  EXPECT_EQ(res->wrong_bytes, 0) << "remote lines landed in the local area";
  EXPECT_EQ(res->seen_version, res->local_version) << "a remote version was published into the local area";
  kill(writer, SIGKILL);
  Reap(writer, 10000);
}

}  // namespace
}  // namespace dsm::testing
