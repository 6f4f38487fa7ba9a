// SIGKILL at a random moment during replication, then recovery, many times:
// the writer process, the writer host's dsmd, a reader host's dsmd, a reader
// process. Three hosts; a writer on host 1 publishes "mh/area" (1% of its
// lines every 2 ms), readers on hosts 2 and 3 follow it. After the kill, the
// daemon is started again, and a new writer of the same name (when the writer
// or its host died) or a new reader (when a reader or its host died) takes
// over. Every trial checks:
// - no client dies of a signal (a killed process aside);
// - states: after a writer's death its replicas are writer-gone on hosts 2
//   and 3, and the dead writer's replica is never live again;
// - the new incarnation reaches every host byte for byte: each replica's
//   XXH3 equals host 1's area at the writer's last version, and new readers
//   see exactly that version, whole.
// DSM_KILL_TRIALS trials per case (default 20); DSM_SOAK_SEED picks the moments.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "dsm/dsm.h"
#include "tests/multihost/replication_workload.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/env.h"

namespace dsm::testing {
namespace {

using nlohmann::json;

enum class Victim { kWriterProcess, kWriterDaemon, kReaderDaemon, kReaderProcess };

const char* Name(Victim v) {
  switch (v) {
    case Victim::kWriterProcess: return "WriterProcess";
    case Victim::kWriterDaemon: return "WriterHostsDaemon";
    case Victim::kReaderDaemon: return "ReaderHostsDaemon";
    case Victim::kReaderProcess: return "ReaderProcess";
  }
  return "?";
}

constexpr uint64_t kFinalVersions = 200;  // of the writer that finishes a trial

// Where the trial went wrong ("" if it did not).
struct Trial {
  std::string failure;
  void Fail(const std::string& why) {
    if (failure.empty()) failure = why;
  }
};

std::string SignalOf(const char* who, int code) {
  return code < 0 ? std::string(who) + " died of signal " + std::to_string(-code) : "";
}

// The live replica of "mh/area" in a dsmctl listing (a retired one keeps
// the name but is never live), or null.
json LiveReplica(const json& ctl) {
  if (ctl.is_discarded() || !ctl.contains("areas")) return nullptr;
  for (const json& a : ctl["areas"]) {
    if (a["name"] == "mh/area" && a["replica"].get<bool>() && a["state"] == "live") return a;
  }
  return nullptr;
}

// Host 1's area and the live replicas on hosts 2 and 3 all at `version`
// with the same XXH3.
bool Replicated(VirtualCluster& c, uint64_t version, std::string* why) {
  const json origin = VirtualCluster::FindArea(c.Dsmctl(1), "mh/area", false);
  if (origin.is_null() || origin["content"]["version"].get<uint64_t>() != version) {
    *why = "host 1: " + origin.dump();
    return false;
  }
  for (int h : {2, 3}) {
    const json r = LiveReplica(c.Dsmctl(h));
    if (r.is_null() || r["content"] != origin["content"]) {
      *why = "host " + std::to_string(h) + ": " + r.dump() + " against host 1's " +
             origin["content"].dump();
      return false;
    }
  }
  return true;
}

void RunTrial(VirtualCluster& c, Victim victim, std::mt19937_64& rng, uint64_t seed, Trial* t) {
  WorkloadOptions o;
  o.versions = 100000;  // until stopped
  o.readers = 0;
  o.seed = seed;
  o.reader_timeout_s = 5;  // a bound: the trial tells its readers when to leave
  Shared<WorkloadBoard> b;
  b->writer_hold = true;
  pid_t writer = Spawn([&] { return RunWriter(c.socket(1), o, &*b); });
  if (!WaitFor([&] { return b->allocated.load(); }, 20000)) return t->Fail("writer did not allocate");
  // Readers that follow the area until the writer is done or they time out.
  pid_t readers[4] = {-1, -1, -1, -1};
  for (int h : {2, 3}) readers[h] = Spawn([&, h] { return RunReader(c.socket(h), h - 2, o, &*b); });
  if (!WaitFor([&] { return b->writer_version.load() >= 20; }, 20000)) {
    return t->Fail("writer stuck at version " + std::to_string(b->writer_version.load()));
  }
  WaitFor([&] { return false; }, static_cast<int>(rng() % 300));  // a random moment
  int64_t skip[4] = {-1, -1, -1, -1};
  const bool writer_dies = victim == Victim::kWriterProcess || victim == Victim::kWriterDaemon;
  if (writer_dies) {
    const json r2 = VirtualCluster::FindArea(c.Dsmctl(2), "mh/area", true);
    const json r3 = VirtualCluster::FindArea(c.Dsmctl(3), "mh/area", true);
    if (!r2.is_null()) skip[2] = r2["index"].get<int64_t>();
    if (!r3.is_null()) skip[3] = r3["index"].get<int64_t>();
  }

  // The readers were there for the kill; they leave now (one of them may
  // follow a replica that will not move again).
  const auto readers_leave = [&] { b->readers_stop = true; };
  switch (victim) {
    case Victim::kWriterProcess:
      kill(writer, SIGKILL);
      Reap(writer, 10000);
      writer = -1;
      break;
    case Victim::kWriterDaemon: {
      const std::string before = VirtualCluster::IncarnationOf(c.Dsmctl(2), 1);
      kill(c.DaemonPid(1), SIGKILL);
      b->writer_stop = true;  // it goes on alone, then exits
      b->writer_may_exit = true;
      if (const std::string s = SignalOf("old writer", Reap(writer, 30000)); !s.empty()) t->Fail(s);
      writer = -1;
      if (!c.StartDaemon(1)) return t->Fail("cluster.sh start 1 failed after SIGKILL");
      const std::string now = VirtualCluster::IncarnationOf(c.Dsmctl(1), 1);
      if (!WaitFor([&] {
            return VirtualCluster::IncarnationOf(c.Dsmctl(2), 1) == now &&
                   VirtualCluster::IncarnationOf(c.Dsmctl(3), 1) == now;
          }, 5000) || now == before) {
        return t->Fail("hosts 2 and 3 never believed host 1's new incarnation " + now);
      }
      break;
    }
    case Victim::kReaderDaemon:
      kill(c.DaemonPid(2), SIGKILL);
      readers_leave();
      if (const std::string s = SignalOf("reader on host 2", Reap(readers[2], 30000)); !s.empty()) {
        t->Fail(s);
      }
      readers[2] = -1;
      if (!c.StartDaemon(2)) return t->Fail("cluster.sh start 2 failed after SIGKILL");
      break;
    case Victim::kReaderProcess:
      kill(readers[2], SIGKILL);
      Reap(readers[2], 10000);
      readers[2] = -1;
      break;
  }

  if (writer_dies) {
    // The dead writer's replicas: writer-gone, never live again.
    for (int h : {2, 3}) {
      if (skip[h] < 0) continue;
      const bool gone = WaitFor([&] {
        const json a = VirtualCluster::AreaAt(c.Dsmctl(h), static_cast<uint32_t>(skip[h]));
        return a.is_null() || a["name"] != "mh/area" || a["state"] != "live";
      }, 3000);
      if (!gone) t->Fail("host " + std::to_string(h) + " kept the dead writer's replica live");
    }
    // A new writer of the name, other lines; it finishes this time. The old
    // readers stop following the dead writer's versions.
    b->writer_stop = true;
    b->writer_may_exit = true;
    readers_leave();
    for (int h : {2, 3}) {
      if (readers[h] > 0) {
        if (const std::string s = SignalOf("reader", Reap(readers[h], 30000)); !s.empty()) t->Fail(s);
        readers[h] = -1;
      }
    }
  }
  Shared<WorkloadBoard> b2;
  WorkloadOptions o2 = o;
  o2.versions = kFinalVersions;
  o2.seed = seed + 1;
  WorkloadBoard* finishing = &*b;
  if (writer_dies) {
    b2->writer_hold = true;
    writer = Spawn([&] { return RunWriter(c.socket(1), o2, &*b2); });
    finishing = &*b2;
  } else {
    b->writer_stop = true;  // the writer it already has finishes now
  }
  if (!WaitFor([&] { return finishing->writer_done.load(); }, 30000)) {
    t->Fail("the finishing writer never finished");
  }
  const uint64_t last = finishing->writer_version.load();
  // New readers on both hosts see the last version, whole; the replicas
  // equal host 1's area.
  Shared<uint64_t> seen[4];
  pid_t fresh[4] = {-1, -1, -1, -1};
  for (int h : {2, 3}) {
    fresh[h] = Spawn([&, h] { return AttachAndCheck(c.socket(h), last, o.area_bytes, &*seen[h]); });
  }
  for (int h : {2, 3}) {
    const int rc = Reap(fresh[h], 60000);
    if (rc != 0 || *seen[h] != last) {
      t->Fail("new reader on host " + std::to_string(h) + ": code " + std::to_string(rc) +
              ", version " + std::to_string(*seen[h]) + " of " + std::to_string(last));
    }
  }
  std::string why;
  if (!WaitFor([&] { return Replicated(c, last, &why); }, 10000)) {
    t->Fail("replicas differ: " + why);
  }
  // Everyone leaves; the next trial starts from here.
  readers_leave();
  finishing->writer_may_exit = true;
  b->writer_may_exit = true;
  if (writer > 0) {
    if (const std::string s = SignalOf("writer", Reap(writer, 30000)); !s.empty()) t->Fail(s);
  }
  for (int h : {2, 3}) {
    if (readers[h] > 0) {
      if (const std::string s = SignalOf("reader", Reap(readers[h], 30000)); !s.empty()) t->Fail(s);
    }
  }
}

class KillMatrixSoak : public ::testing::TestWithParam<Victim> {};

TEST_P(KillMatrixSoak, EveryTrialRecoversWithTheNewIncarnationEverywhere) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  const int trials = static_cast<int>(EnvOr("DSM_KILL_TRIALS", 20));
  const uint64_t seed = EnvOr("DSM_SOAK_SEED", 1);
  std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(GetParam()));
  VirtualCluster cluster(3);
  ASSERT_TRUE(cluster.ok());
  int failed = 0;
  for (int i = 0; i < trials; ++i) {
    Trial t;
    const auto start = std::chrono::steady_clock::now();
    RunTrial(cluster, GetParam(), rng, seed * 100000 + static_cast<uint64_t>(i) * 10, &t);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("kill %s trial %d/%d: %s (%.1f s)\n", Name(GetParam()), i + 1, trials,
                t.failure.empty() ? "ok" : t.failure.c_str(), s);
    std::fflush(stdout);
    if (!t.failure.empty()) {
      ++failed;
      ADD_FAILURE() << "trial " << i + 1 << ": " << t.failure;
    }
  }
  std::printf("kill %s: %d of %d trials failed\n", Name(GetParam()), failed, trials);
}

INSTANTIATE_TEST_SUITE_P(EveryVictim, KillMatrixSoak,
                         ::testing::Values(Victim::kWriterProcess, Victim::kWriterDaemon,
                                           Victim::kReaderDaemon, Victim::kReaderProcess),
                         [](const auto& info) { return std::string(Name(info.param)); });

}  // namespace
}  // namespace dsm::testing
