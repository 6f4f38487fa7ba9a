// A daemon killed with SIGKILL and started again is a new incarnation that
// every host learns of. Three hosts: a writer on host 1 publishes "mh/area",
// a reader on host 2 holds a replica of it. Host 1's dsmd and writer are
// killed; `cluster.sh start 1` must bring the daemon back; a new writer
// allocates the same name there (a fresh daemon gives it the dead area's
// index and generation) and writes other lines. Then:
// - hosts 2 and 3 never show the dead incarnation's replica live again, and
//   the reader still holding it sees its writer gone and keeps its bytes;
// - new readers on hosts 2 and 3 attach the name and get the new writer's
//   area, byte for byte (XXH3 equal to host 1's at the same version).
#include <gtest/gtest.h>
#include <signal.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "dsm/dsm.h"
#include "tests/multihost/replication_workload.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"

namespace dsm::testing {
namespace {

using nlohmann::json;

// Progress with the time since the test began, for the log of a slow run.
void Step(const char* what) {
  static const auto start = std::chrono::steady_clock::now();
  std::printf("[%7.2f s] %s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), what);
  std::fflush(stdout);
}

struct OldReader {
  std::atomic<bool> attached{false};
  std::atomic<bool> release{false};
  uint64_t version = 0;
  bool writer_alive_after = true;
  bool whole = false;  // its snapshot is exactly one version of the old writer
};

TEST(Incarnation, AWriterHostsRestartedDaemonIsANewIncarnationEverywhere) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(3);
  ASSERT_TRUE(cluster.ok());
  WorkloadOptions o;
  o.versions = 100000;  // until killed
  o.readers = 0;
  Shared<WorkloadBoard> b;
  const pid_t writer = Spawn([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));

  Shared<OldReader> old;
  const pid_t old_reader = Spawn([&] {
    if (!Init(cluster.socket(2))) return 40;
    const void* p = nullptr;
    if (dsm_attach("mh/area", 20000, &p, nullptr) != DSM_OK) return 41;
    if (dsm_wait_version(p, 20, 20000) != DSM_OK) return 42;
    old->attached = true;
    for (int i = 0; i < 120000 && !old->release; ++i) {
      dsm_service();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    dsm_area_status st{};
    dsm_status(p, &st);
    old->writer_alive_after = st.writer_alive;
    old->version = st.version;
    Stamp s;
    std::memcpy(&s, p, sizeof(s));
    old->whole = s.version == st.version &&
                 s.hash == XXH3_64bits(static_cast<const uint8_t*>(p) + 64, o.area_bytes - 64);
    return dsm_fini() == DSM_OK ? 0 : 43;
  });
  ASSERT_TRUE(WaitFor([&] { return old->attached.load(); }, 30000));
  const json old_replica = VirtualCluster::FindArea(cluster.Dsmctl(2), "mh/area", true);
  ASSERT_FALSE(old_replica.is_null()) << "no replica on host 2";
  const uint32_t old_index = old_replica["index"].get<uint32_t>();
  Step("old reader attached on host 2; killing host 1's dsmd and writer");

  // Host 1's daemon and writer die.
  const int daemon1 = cluster.DaemonPid(1);
  ASSERT_GT(daemon1, 0);
  ASSERT_EQ(kill(daemon1, SIGKILL), 0);
  kill(writer, SIGKILL);
  Reap(writer, 10000);
  ASSERT_TRUE(WaitFor(
      [&] {
        const json a = VirtualCluster::AreaAt(cluster.Dsmctl(2), old_index);
        return !a.is_null() && a["state"] != "live";
      },
      5000))
      << "host 2 still shows the dead writer's area live";

  Step("host 2 shows the writer gone; starting host 1's dsmd again");
  // Started again right away: cluster.sh must wait for the dying daemon.
  ASSERT_TRUE(cluster.StartDaemon(1)) << "cluster.sh start 1 failed";
  ASSERT_GT(cluster.DaemonPid(1), 0);
  ASSERT_NE(cluster.DaemonPid(1), daemon1);
  // Hosts 2 and 3 confirm the new incarnation with host 1 (a hello): from
  // then on the name is the new area's there.
  std::string incarnation1;
  auto incarnation_of_1 = [&](int seen_by) {
    return VirtualCluster::IncarnationOf(cluster.Dsmctl(seen_by), 1);
  };
  ASSERT_TRUE(WaitFor([&] { return !(incarnation1 = incarnation_of_1(1)).empty(); }, 5000));
  ASSERT_TRUE(WaitFor(
      [&] { return incarnation_of_1(2) == incarnation1 && incarnation_of_1(3) == incarnation1; },
      5000))
      << "host 1 restarted as " << incarnation1 << "; host 2 believes " << incarnation_of_1(2)
      << ", host 3 " << incarnation_of_1(3);

  Step("hosts 2 and 3 believe host 1's new incarnation; new writer and readers");
  WorkloadOptions o2 = o;
  o2.versions = 300;
  o2.seed = 4242;  // other lines than the dead writer's
  Shared<WorkloadBoard> b2;
  b2->writer_hold = true;
  const pid_t writer2 = Spawn([&] { return RunWriter(cluster.socket(1), o2, &*b2); });
  ASSERT_TRUE(WaitFor([&] { return b2->allocated.load(); }, 20000));
  // New readers on hosts 2 and 3 attach the name and wait for the new
  // writer's last version, which they check is one whole version.
  Shared<uint64_t> seen2, seen3;
  const pid_t reader2 = Spawn(
      [&] { return AttachAndCheck(cluster.socket(2), o2.versions, o2.area_bytes, &*seen2); });
  const pid_t reader3 = Spawn(
      [&] { return AttachAndCheck(cluster.socket(3), o2.versions, o2.area_bytes, &*seen3); });

  // Meanwhile the dead incarnation's replica is never live again; at the end
  // hosts 2 and 3 hold host 1's bytes.
  int old_live = 0;
  json latest2, latest3, origin;
  const bool replicated = WaitFor(
      [&] {
        const json ctl2 = cluster.Dsmctl(2);
        const json a = VirtualCluster::AreaAt(ctl2, old_index);
        // The old reader holds that slot: it cannot be reused meanwhile.
        if (!a.is_null() && a["name"] == "mh/area" && a["state"] == "live") ++old_live;
        if (!b2->writer_done) return false;
        origin = VirtualCluster::FindArea(cluster.Dsmctl(1), "mh/area", false);
        latest2 = VirtualCluster::FindArea(ctl2, "mh/area", true, old_index);
        latest3 = VirtualCluster::FindArea(cluster.Dsmctl(3), "mh/area", true);
        auto at_final = [&](const json& r) {
          return !r.is_null() && r["state"] == "live" && r["version"].get<uint64_t>() == o2.versions;
        };
        return at_final(latest2) && at_final(latest3);
      },
      60000);
  Step("new writer done and replicated");
  EXPECT_TRUE(replicated) << "host 2: " << latest2.dump() << "\nhost 3: " << latest3.dump();
  EXPECT_EQ(old_live, 0) << "the dead incarnation's replica was shown live";
  ASSERT_FALSE(origin.is_null());
  EXPECT_NE(latest2["index"].get<uint32_t>(), old_index) << "the new area is a new replica";
  EXPECT_EQ(latest2["content"], origin["content"]) << "host 2's replica differs from host 1's area";
  EXPECT_EQ(latest3["content"], origin["content"]) << "host 3's replica differs from host 1's area";
  EXPECT_EQ(Reap(reader2, 30000), 0) << "new reader on host 2";
  EXPECT_EQ(Reap(reader3, 30000), 0) << "new reader on host 3";
  EXPECT_EQ(*seen2, o2.versions);
  EXPECT_EQ(*seen3, o2.versions);

  Step("new readers done");
  // The old reader kept the dead writer's last version and sees it gone.
  old->release = true;
  EXPECT_EQ(Reap(old_reader, 30000), 0);
  EXPECT_FALSE(old->writer_alive_after);
  EXPECT_TRUE(old->whole);
  EXPECT_GT(old->version, 0u);
  b2->writer_may_exit = true;
  EXPECT_EQ(Reap(writer2, 30000), 0);
}

// Clients of a daemon killed during replication do not abort: the reader on
// host 2 when host 2's dsmd dies, the writer on host 1 when host 1's dies.
// Each goes on to the end of its loop and exits (dsm_fini included).
TEST(Incarnation, ClientsOfAKilledDaemonExitNormally) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(3);
  ASSERT_TRUE(cluster.ok());
  WorkloadOptions o;
  o.versions = 100000;  // until stopped
  o.area_bytes = 16u << 20;
  o.readers = 2;
  o.reader_timeout_s = 8;
  Shared<WorkloadBoard> b;
  const pid_t writer = Spawn([&] { return RunWriter(cluster.socket(1), o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));
  const pid_t reader2 = Spawn([&] { return RunReader(cluster.socket(2), 0, o, &*b); });
  const pid_t reader3 = Spawn([&] { return RunReader(cluster.socket(3), 1, o, &*b); });
  ASSERT_TRUE(WaitFor([&] { return b->writer_version.load() >= 200; }, 30000));
  ASSERT_EQ(kill(cluster.DaemonPid(2), SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(cluster.DaemonPid(1), SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  b->writer_stop = true;
  b->writer_may_exit = true;
  // An exit code (whatever the workload says of its run), never a signal.
  const int w = Reap(writer, 60000);
  const int r2 = Reap(reader2, 60000);
  const int r3 = Reap(reader3, 60000);
  EXPECT_GE(w, 0) << "the writer died of signal " << -w;
  EXPECT_GE(r2, 0) << "the reader on host 2 died of signal " << -r2;
  EXPECT_GE(r3, 0) << "the reader on host 3 died of signal " << -r3;
  EXPECT_EQ(b->readers[0].torn, 0u);
  EXPECT_EQ(b->readers[1].torn, 0u);
}

}  // namespace
}  // namespace dsm::testing
