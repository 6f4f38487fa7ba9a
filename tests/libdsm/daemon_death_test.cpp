// dsmd killed with SIGKILL while its clients are in each kind of call, or
// between calls: no client aborts or hangs. Calls that need the daemon return
// DSM_ERR_DAEMON_GONE with a message; mapped areas stay readable (the reader's
// last version, the writer's own memory); dsm_free and dsm_fini return, and
// the processes exit normally, with or without dsm_fini.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using testing::Reap;
using testing::Shared;
using testing::Spawn;
using testing::WaitFor;

constexpr size_t kAreaBytes = 1u << 20;
constexpr size_t kWords = kAreaBytes / sizeof(uint64_t);
constexpr const char* kName = "death/area";
// How long clients go on calling after the kill.
constexpr auto kAfterKill = std::chrono::milliseconds(300);

// What each process is doing when the daemon dies.
enum class Moment {
  kPublishing,      // writer: write, log, publish; reader: read every version
  kWaitingVersion,  // reader: dsm_wait_version on a version never published
  kAttaching,       // a second reader: dsm_attach of a name nobody allocates
  kStatus,          // both: dsm_status and dsm_get_version in a loop
  kIdleThenFini,    // neither calls anything until after the kill
  kIdleThenExit,    // as above, and they exit without dsm_fini
};

const char* Name(Moment m) {
  switch (m) {
    case Moment::kPublishing: return "Publishing";
    case Moment::kWaitingVersion: return "WaitingVersion";
    case Moment::kAttaching: return "Attaching";
    case Moment::kStatus: return "Status";
    case Moment::kIdleThenFini: return "IdleThenFini";
    case Moment::kIdleThenExit: return "IdleThenExit";
  }
  return "?";
}

struct Board {
  std::atomic<bool> allocated{false};
  std::atomic<int> ready{0};         // processes in their loop
  std::atomic<bool> killed{false};
  std::atomic<int> bad_codes{0};     // a call returned something it must not
  std::atomic<int> last_bad_code{0};
  std::atomic<int> gone_seen{0};     // processes that got DSM_ERR_DAEMON_GONE
  std::atomic<int> unreadable{0};    // memory that did not hold what it should
  char gone_message[256] = {};
  char unreadable_detail[256] = {};  // the first
};

bool Uniform(const uint64_t* w, uint64_t* value) {
  const uint64_t v = w[0];
  for (size_t i = 1; i < kWords; ++i) {
    if (w[i] != v) return false;
  }
  *value = v;
  return true;
}

// A return code that a call may give once its daemon is gone (or just before).
void Check(Board& b, int rc, std::initializer_list<int> allowed) {
  for (int ok : allowed) {
    if (rc == ok) return;
  }
  b.last_bad_code = rc;
  ++b.bad_codes;
}

// After the kill: something that needs the daemon says it is gone.
void ExpectGone(Board& b) {
  void* p = nullptr;
  const int rc = dsm_alloc("death/after", 4096, nullptr, &p);
  if (rc == DSM_ERR_DAEMON_GONE) {
    if (++b.gone_seen == 1) {
      std::snprintf(b.gone_message, sizeof(b.gone_message), "%s", dsm_last_error());
    }
  } else {
    b.last_bad_code = rc;
    ++b.bad_codes;
  }
}

template <typename F>
void UntilAfterKill(Board& b, F step) {
  const auto hard_stop = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!b.killed && std::chrono::steady_clock::now() < hard_stop) step();
  const auto end = std::chrono::steady_clock::now() + kAfterKill;
  while (std::chrono::steady_clock::now() < end) step();
}

// The moments both processes share: dsm_status and dsm_get_version in a
// loop, or nothing, until after the kill.
void StatusOrIdle(Board& b, Moment m, const void* p) {
  if (m == Moment::kStatus) {
    UntilAfterKill(b, [&] {
      dsm_area_status st{};
      Check(b, dsm_status(p, &st), {DSM_OK, DSM_ERR_DAEMON_GONE});
      uint64_t version = 0;
      Check(b, dsm_get_version(p, &version), {DSM_OK, DSM_ERR_DAEMON_GONE});
    });
  } else {
    UntilAfterKill(b, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  }
}

int Writer(Board& b, Moment m) {
  if (dsm_init(nullptr) != DSM_OK) return 10;
  void* p = nullptr;
  if (dsm_alloc(kName, kAreaBytes, nullptr, &p) != DSM_OK) return 11;
  auto* w = static_cast<uint64_t*>(p);
  uint64_t v = 1;
  for (size_t i = 0; i < kWords; ++i) w[i] = v;
  dsm_log(p, kAreaBytes);
  if (dsm_publish(p) != DSM_OK) return 12;
  b.allocated = true;
  ++b.ready;
  if (m == Moment::kPublishing) {
    UntilAfterKill(b, [&] {
      ++v;
      for (size_t i = 0; i < kWords; ++i) w[i] = v;
      dsm_log(p, kAreaBytes);
      Check(b, dsm_publish(p), {DSM_OK, DSM_ERR_BUSY, DSM_ERR_DAEMON_GONE});
    });
  } else {
    StatusOrIdle(b, m, p);
  }
  ExpectGone(b);
  // The writer's own memory is its, daemon or not.
  uint64_t held = 0;
  if (!Uniform(w, &held) || held != v) ++b.unreadable;
  // exit(), not the _exit of Spawn: atexit handlers and static destructors
  // run with the session open, as in a program that never calls dsm_fini.
  if (m == Moment::kIdleThenExit) std::exit(0);
  Check(b, dsm_free(p), {DSM_OK, DSM_ERR_DAEMON_GONE});
  Check(b, dsm_fini(), {DSM_OK});
  return 0;
}

int Reader(Board& b, Moment m) {
  if (dsm_init(nullptr) != DSM_OK) return 20;
  const void* p = nullptr;
  if (dsm_attach(kName, 10000, &p, nullptr) != DSM_OK) return 21;
  const auto* w = static_cast<const uint64_t*>(p);
  ++b.ready;
  if (m == Moment::kPublishing) {
    UntilAfterKill(b, [&] {
      Check(b, dsm_service(), {DSM_OK, DSM_ERR_DAEMON_GONE});
      uint64_t held = 0;
      const uint64_t version = dsm_version(p);
      const bool uniform = Uniform(w, &held);
      // A publish refused busy leaves its value to a later version: the
      // value written is at least the version, never below.
      if (!uniform || held < version) {
        if (b.unreadable++ == 0) {
          std::snprintf(b.unreadable_detail, sizeof(b.unreadable_detail),
                        "uniform %d held %llu version %llu killed %d",
                        uniform, (unsigned long long)held, (unsigned long long)version, (int)b.killed.load());
        }
      }
    });
  } else if (m == Moment::kWaitingVersion) {
    UntilAfterKill(b, [&] {
      Check(b, dsm_wait_version(p, UINT64_MAX / 2, 50),
            {DSM_ERR_TIMEOUT, DSM_ERR_DAEMON_GONE});
    });
  } else {
    StatusOrIdle(b, m, p);
  }
  ExpectGone(b);
  // The last version seen stays mapped and whole.
  uint64_t held = 0;
  if (!Uniform(w, &held) || held == 0) ++b.unreadable;
  if (m == Moment::kIdleThenExit) std::exit(0);
  Check(b, dsm_free(p), {DSM_OK, DSM_ERR_DAEMON_GONE});
  Check(b, dsm_fini(), {DSM_OK});
  return 0;
}

// Waits in dsm_attach for a name nobody allocates when the daemon dies.
int Attacher(Board& b) {
  if (dsm_init(nullptr) != DSM_OK) return 30;
  ++b.ready;
  UntilAfterKill(b, [&] {
    const void* p = nullptr;
    Check(b, dsm_attach("death/never", 50, &p, nullptr), {DSM_ERR_TIMEOUT, DSM_ERR_DAEMON_GONE});
  });
  ExpectGone(b);
  Check(b, dsm_fini(), {DSM_OK});
  return 0;
}

// Kills dsmd (started with `daemon_args`) while its clients are at moment `m`.
void KillDaemonAt(Moment m, const std::vector<std::string>& daemon_args) {
  testing::DsmdProcess daemon(daemon_args);
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<Board> b;
  const pid_t writer = Spawn([&] { return Writer(*b, m); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 10000));
  const pid_t reader = Spawn([&] { return Reader(*b, m); });
  int processes = 2;
  pid_t attacher = -1;
  if (m == Moment::kAttaching) {
    attacher = Spawn([&] { return Attacher(*b); });
    ++processes;
  }
  ASSERT_TRUE(WaitFor([&] { return b->ready.load() == processes; }, 10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // mid-loop
  daemon.Kill();
  b->killed = true;

  EXPECT_EQ(Reap(writer, 30000), 0) << "writer (a negative value is the signal that killed it)";
  EXPECT_EQ(Reap(reader, 30000), 0) << "reader";
  if (attacher > 0) {
    EXPECT_EQ(Reap(attacher, 30000), 0) << "attacher";
  }
  EXPECT_EQ(b->bad_codes.load(), 0) << "last unexpected code: " << b->last_bad_code.load() << " ("
                                    << dsm_strerror(b->last_bad_code.load()) << ")";
  EXPECT_EQ(b->gone_seen.load(), processes) << "every process's dsm_alloc says the daemon is gone";
  EXPECT_NE(std::string(b->gone_message).find("dsmd"), std::string::npos) << b->gone_message;
  EXPECT_EQ(b->unreadable.load(), 0) << b->unreadable_detail;
}

class DaemonDeath : public ::testing::TestWithParam<Moment> {};

TEST_P(DaemonDeath, ClientsGetDaemonGoneKeepTheirMemoryAndExitCleanly) {
  KillDaemonAt(GetParam(), {});
}

// dsmd --no-stages: the writer writes the buffers itself when dsmd dies.
TEST(DaemonDeathUnstaged, AWriterPublishingItselfKeepsItsReadersWhole) {
  KillDaemonAt(Moment::kPublishing, {"--no-stages"});
}

INSTANTIATE_TEST_SUITE_P(EveryMoment, DaemonDeath,
                         ::testing::Values(Moment::kPublishing, Moment::kWaitingVersion,
                                           Moment::kAttaching, Moment::kStatus,
                                           Moment::kIdleThenFini, Moment::kIdleThenExit),
                         [](const auto& info) { return std::string(Name(info.param)); });

}  // namespace
}  // namespace dsm
