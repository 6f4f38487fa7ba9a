// Page tracking (dsm_alloc_opts.tracking = DSM_TRACK_PAGES): a writer that never
// calls dsm_log, changing its area through memcpy, std::sort, std::fill and a
// plain loop, is followed exactly by a reader; several writer threads storing
// into the same pages lose no line; rewriting equal bytes makes no version; a
// program's own SIGSEGV handler still gets its faults, and a real crash still
// crashes. Every test runs with both mechanisms (userfaultfd WP_ASYNC and the
// mprotect fallback, forced through dsm_alloc_opts.page_tracker), on memfd and
// on hugetlbfs backing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"
#include "tests/support/dsm_helpers.h"
#include "tests/support/dsmd_process.h"
#include "tests/support/plain_stores.h"

namespace dsm {
namespace {

using testing::DsmdProcess;
using testing::Reap;
using testing::Shared;
using testing::Spawn;

constexpr size_t kAreaBytes = 4u << 20;
constexpr uint64_t kVersions = 300;

enum class Backing { kMemfd, kHugetlbfs };

struct Param {
  int tracker;  // DSM_PAGE_TRACKER_UFFD or _MPROTECT
  Backing backing;
};

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(info.param.tracker == DSM_PAGE_TRACKER_UFFD ? "Uffd" : "Mprotect") +
         (info.param.backing == Backing::kMemfd ? "Memfd" : "Hugetlbfs");
}

dsm_alloc_opts TrackedOpts(int tracker) {
  dsm_alloc_opts o{};
  o.tracking = DSM_TRACK_PAGES;
  o.page_tracker = static_cast<uint32_t>(tracker);
  o.reader_buffers = 3;
  return o;
}

class PageTracking : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::vector<std::string> args{"--region-size", "64M"};
    if (GetParam().backing == Backing::kHugetlbfs) {
      if (!testing::HugetlbfsMounted() || testing::FreeHugepages() < 16) {
        GTEST_SKIP() << "needs hugetlbfs on /dev/hugepages with 16 free pages";
      }
      args.insert(args.end(), {"--backing", "hugetlbfs"});
    }
    daemon_ = std::make_unique<DsmdProcess>(args);
    ASSERT_TRUE(daemon_->ok());
    daemon_->ExportSocket();
  }
  std::unique_ptr<DsmdProcess> daemon_;
};

// ---- Plain stores reach a reader, version after version -------------------

struct StoresBoard {
  std::atomic<uint64_t> hash[kVersions + 1];  // writer's XXH3 of each version
  std::atomic<bool> writer_done{false};
  std::atomic<bool> reader_done{false};
  int writer_error = 0;
  uint64_t writer_hash = 0;
  int tracker_in_use = -1;
  uint64_t lines_changed = 0;
  uint64_t version_after_equal_rewrite = 0;
  uint64_t lines_after_equal_rewrite = 0;
  // Reader's findings.
  uint64_t versions_seen = 0;
  uint64_t mismatched = 0;
  uint64_t backwards = 0;
  uint64_t final_version = 0;
  uint64_t final_hash = 0;
};

int StoresWriter(StoresBoard* b, int tracker) {
  if (dsm_init(nullptr) != DSM_OK) return 10;
  const dsm_alloc_opts opts = TrackedOpts(tracker);
  void* p = nullptr;
  if (dsm_alloc("pages/stores", kAreaBytes, &opts, &p) != DSM_OK) {
    std::fprintf(stderr, "dsm_alloc: %s\n", dsm_last_error());
    return 11;
  }
  auto* area = static_cast<uint8_t*>(p);
  std::mt19937_64 rng(7);
  for (uint64_t v = 1; v <= kVersions; ++v) {
    testing::PlainStoreMutation(area, kAreaBytes, v, rng);
    b->hash[v].store(XXH3_64bits(area, kAreaBytes));
    const int rc = testing::PublishRetrying(p);
    if (rc != DSM_OK || dsm_version(p) != v) {
      std::fprintf(stderr, "round %lu: rc %d version %lu: %s\n", static_cast<unsigned long>(v), rc,
                   static_cast<unsigned long>(dsm_version(p)), dsm_last_error());
      return 12;
    }
  }
  dsm_area_status st{};
  dsm_status(p, &st);
  b->tracker_in_use = st.page_tracker;
  b->lines_changed = st.lines_changed;
  b->writer_hash = XXH3_64bits(area, kAreaBytes);
  // Rewrite every byte with itself: pages are written, no line changes.
  std::vector<uint8_t> copy(area, area + kAreaBytes);
  std::memcpy(area, copy.data(), kAreaBytes);
  if (testing::PublishRetrying(p) != DSM_OK) return 13;
  dsm_status(p, &st);
  b->version_after_equal_rewrite = st.version;
  b->lines_after_equal_rewrite = st.lines_changed;
  b->writer_done = true;
  testing::WaitFor([&] { return b->reader_done.load(); }, 60000);
  dsm_fini();
  return 0;
}

int StoresReader(StoresBoard* b) {
  if (dsm_init(nullptr) != DSM_OK) return 20;
  const void* p = nullptr;
  if (dsm_attach("pages/stores", 10000, &p, nullptr) != DSM_OK) return 21;
  uint64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v < last) ++b->backwards;
    if (v != last && v != 0) {
      ++b->versions_seen;
      if (XXH3_64bits(p, kAreaBytes) != b->hash[v].load()) ++b->mismatched;
    }
    last = v;
    if (b->writer_done && v == kVersions) break;
  }
  b->final_version = dsm_version(p);
  b->final_hash = XXH3_64bits(p, kAreaBytes);
  b->reader_done = true;
  dsm_fini();
  return 0;
}

TEST_P(PageTracking, PlainStoresReachReadersVersionByVersion) {
  Shared<StoresBoard> b;
  const int tracker = GetParam().tracker;
  const pid_t writer = Spawn([&] { return StoresWriter(&*b, tracker); });
  const pid_t reader = Spawn([&] { return StoresReader(&*b); });
  EXPECT_EQ(Reap(reader, 90000), 0);
  EXPECT_EQ(Reap(writer, 90000), 0);
  EXPECT_EQ(b->tracker_in_use, tracker);
  EXPECT_GT(b->versions_seen, 10u);
  EXPECT_EQ(b->mismatched, 0u);
  EXPECT_EQ(b->backwards, 0u);
  EXPECT_EQ(b->final_version, kVersions);
  EXPECT_EQ(b->final_hash, b->writer_hash);
  EXPECT_GT(b->lines_changed, 0u);
  EXPECT_EQ(b->version_after_equal_rewrite, kVersions) << "equal bytes made a new version";
  EXPECT_EQ(b->lines_after_equal_rewrite, b->lines_changed);
  std::printf("reader checked %lu of %lu versions; %lu lines changed\n",
              static_cast<unsigned long>(b->versions_seen), static_cast<unsigned long>(kVersions),
              static_cast<unsigned long>(b->lines_changed));
}

// ---- Several writer threads in the same pages ------------------------------

constexpr int kThreads = 4;
constexpr uint64_t kRounds = 200;
constexpr size_t kThreadsBytes = 1u << 20;
constexpr size_t kThreadsWords = kThreadsBytes / 8;

struct ThreadsBoard {
  std::atomic<bool> writer_done{false};
  std::atomic<bool> reader_done{false};
  int writer_error = 0;
  uint64_t final_version = 0;
  uint64_t snapshots = 0;
  uint64_t mixed = 0;      // a thread's words disagreeing within one snapshot
  uint64_t backwards = 0;  // a thread's round going down between snapshots
  uint64_t final_rounds[kThreads] = {};
};

// Word i belongs to thread i % kThreads: every line and page is shared by all
// threads, so their first stores to a protected page race each other.
int ThreadsWriter(ThreadsBoard* b, int tracker) {
  if (dsm_init(nullptr) != DSM_OK) return 10;
  const dsm_alloc_opts opts = TrackedOpts(tracker);
  void* p = nullptr;
  if (dsm_alloc("pages/threads", kThreadsBytes, &opts, &p) != DSM_OK) return 11;
  auto* words = static_cast<uint64_t*>(p);
  std::barrier start(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      dsm_service();  // registers this thread with the quiescence gate
      start.arrive_and_wait();
      for (uint64_t r = 1; r <= kRounds; ++r) {
        for (size_t i = static_cast<size_t>(t); i < kThreadsWords; i += kThreads) words[i] = r;
        // Publishes happen here, once every thread has arrived.
        if (int rc = dsm_service(); rc != DSM_OK && rc != DSM_ERR_BUSY) ++failures;
      }
      dsm_thread_offline();
    });
  }
  for (auto& th : threads) th.join();
  if (failures != 0) return 12;
  if (testing::PublishRetrying(p) != DSM_OK) return 13;
  b->final_version = dsm_version(p);
  b->writer_done = true;
  testing::WaitFor([&] { return b->reader_done.load(); }, 60000);
  dsm_fini();
  return 0;
}

int ThreadsReader(ThreadsBoard* b) {
  if (dsm_init(nullptr) != DSM_OK) return 20;
  const void* p = nullptr;
  if (dsm_attach("pages/threads", 10000, &p, nullptr) != DSM_OK) return 21;
  const auto* words = static_cast<const uint64_t*>(p);
  uint64_t last[kThreads] = {};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();
    ++b->snapshots;
    for (int t = 0; t < kThreads; ++t) {
      const uint64_t r = words[t];
      for (size_t i = static_cast<size_t>(t); i < kThreadsWords; i += kThreads) {
        if (words[i] != r) {
          ++b->mixed;
          break;
        }
      }
      if (r < last[t]) ++b->backwards;
      last[t] = r;
    }
    if (b->writer_done && dsm_version(p) == b->final_version) break;
  }
  for (int t = 0; t < kThreads; ++t) b->final_rounds[t] = words[t];
  for (size_t i = 0; i < kThreadsWords; ++i) {
    if (words[i] != b->final_rounds[i % kThreads]) ++b->mixed;
  }
  b->reader_done = true;
  dsm_fini();
  return 0;
}

TEST_P(PageTracking, WriterThreadsSharingPagesLoseNoLine) {
  Shared<ThreadsBoard> b;
  const int tracker = GetParam().tracker;
  const pid_t writer = Spawn([&] { return ThreadsWriter(&*b, tracker); });
  const pid_t reader = Spawn([&] { return ThreadsReader(&*b); });
  EXPECT_EQ(Reap(reader, 90000), 0);
  EXPECT_EQ(Reap(writer, 90000), 0);
  EXPECT_GT(b->final_version, 1u);
  EXPECT_EQ(b->mixed, 0u);
  EXPECT_EQ(b->backwards, 0u);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(b->final_rounds[t], kRounds) << "thread " << t;
}

// ---- A program's own SIGSEGV handler ---------------------------------------

std::atomic<int> g_own_faults{0};
void* g_own_page = nullptr;

void OwnHandler(int, siginfo_t* info, void*) {
  // The program's own use of SIGSEGV: lazily enabling a guard page.
  if (info->si_addr == g_own_page) {
    ++g_own_faults;
    mprotect(g_own_page, 4096, PROT_READ | PROT_WRITE);
    return;
  }
  _exit(40);  // a fault the program did not expect
}

int OwnHandlerProgram(int tracker) {
  g_own_page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  struct sigaction sa {};
  sa.sa_sigaction = OwnHandler;
  sa.sa_flags = SA_SIGINFO;
  if (sigaction(SIGSEGV, &sa, nullptr) != 0) return 10;
  if (dsm_init(nullptr) != DSM_OK) return 11;
  const dsm_alloc_opts opts = TrackedOpts(tracker);
  void* p = nullptr;
  if (dsm_alloc("pages/own-handler", 1u << 20, &opts, &p) != DSM_OK) return 12;
  auto* area = static_cast<volatile uint8_t*>(p);
  area[100] = 1;                              // tracked: libdsm's business
  static_cast<volatile uint8_t*>(g_own_page)[0] = 1;  // the program's own fault
  area[200000] = 2;
  if (g_own_faults != 1) return 13;
  if (dsm_publish(p) != DSM_OK || dsm_version(p) != 1) return 14;
  dsm_area_status st{};
  if (dsm_status(p, &st) != DSM_OK || st.lines_changed != 2) return 15;
  area[300000] = 3;  // tracking goes on after the program's fault
  if (dsm_publish(p) != DSM_OK || dsm_version(p) != 2) return 16;
  dsm_fini();
  return 0;
}

TEST_P(PageTracking, ProgramsOwnSegvHandlerKeepsItsFaults) {
  const int tracker = GetParam().tracker;
  EXPECT_EQ(Reap(Spawn([&] { return OwnHandlerProgram(tracker); }), 30000), 0);
}

int CrashingProgram(int tracker) {
  if (dsm_init(nullptr) != DSM_OK) return 10;
  const dsm_alloc_opts opts = TrackedOpts(tracker);
  void* p = nullptr;
  if (dsm_alloc("pages/crash", 1u << 20, &opts, &p) != DSM_OK) return 11;
  static_cast<volatile uint8_t*>(p)[0] = 1;
  // A real bug must still crash, not loop in a handler: a store to a page
  // nobody tracks (reserved, never mapped writable).
  void* guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  static_cast<volatile uint8_t*>(guard)[8] = 1;
  return 12;
}

TEST_P(PageTracking, RealCrashStillCrashes) {
  const int tracker = GetParam().tracker;
  EXPECT_EQ(Reap(Spawn([&] { return CrashingProgram(tracker); }), 30000), -SIGSEGV);
}

INSTANTIATE_TEST_SUITE_P(
    Mechanisms, PageTracking,
    ::testing::Values(Param{DSM_PAGE_TRACKER_UFFD, Backing::kMemfd},
                      Param{DSM_PAGE_TRACKER_MPROTECT, Backing::kMemfd},
                      Param{DSM_PAGE_TRACKER_UFFD, Backing::kHugetlbfs},
                      Param{DSM_PAGE_TRACKER_MPROTECT, Backing::kHugetlbfs}),
    Name);

// ---- Choice of mechanism and bad options -----------------------------------

TEST(PageTrackingOptions, AutoPrefersUffdAndEnvironmentForcesMprotect) {
  DsmdProcess daemon({"--region-size", "16M"});
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  const pid_t child = Spawn([] {
    if (dsm_init(nullptr) != DSM_OK) return 10;
    dsm_alloc_opts opts = TrackedOpts(DSM_PAGE_TRACKER_AUTO);
    void* p = nullptr;
    if (dsm_alloc("pages/auto", 1u << 20, &opts, &p) != DSM_OK) return 11;
    dsm_area_status st{};
    dsm_status(p, &st);
    if (st.tracking != DSM_TRACK_PAGES || st.page_tracker != DSM_PAGE_TRACKER_UFFD) return 12;
    setenv("DSM_PAGE_TRACKER", "mprotect", 1);
    void* q = nullptr;
    if (dsm_alloc("pages/auto-env", 1u << 20, &opts, &q) != DSM_OK) return 13;
    dsm_status(q, &st);
    if (st.page_tracker != DSM_PAGE_TRACKER_MPROTECT) return 14;
    // An explicit-log area tracks no pages.
    void* r = nullptr;
    if (dsm_alloc("pages/log", 1u << 20, nullptr, &r) != DSM_OK) return 15;
    dsm_status(r, &st);
    if (st.tracking != DSM_TRACK_LOG || st.page_tracker != DSM_PAGE_TRACKER_NONE) return 16;
    if (std::string(dsm_page_tracker_name(DSM_PAGE_TRACKER_UFFD)) != "uffd-wp-async") return 17;
    dsm_fini();
    return 0;
  });
  EXPECT_EQ(Reap(child, 30000), 0);
}

// AUTO (and 0, the default) picks a real mechanism; status reports that
// mechanism, or NONE for an explicit-log area, and never AUTO.
TEST(PageTrackingOptions, AutoPicksARealTrackerAndStatusNeverSaysAuto) {
  DsmdProcess daemon({"--region-size", "16M"});
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  const pid_t child = Spawn([] {
    if (dsm_init(nullptr) != DSM_OK) return 10;
    auto real = [](const dsm_area_status& st) {
      return st.page_tracker == DSM_PAGE_TRACKER_UFFD ||
             st.page_tracker == DSM_PAGE_TRACKER_MPROTECT;
    };
    dsm_alloc_opts opts = TrackedOpts(DSM_PAGE_TRACKER_AUTO);
    void* p = nullptr;
    if (dsm_alloc("pages/auto-value", 64u << 10, &opts, &p) != DSM_OK) return 11;
    dsm_area_status st{};
    if (dsm_status(p, &st) != DSM_OK || !real(st)) return 12;
    opts.page_tracker = 0;
    if (dsm_alloc("pages/auto-zero", 64u << 10, &opts, &p) != DSM_OK) return 13;
    if (dsm_status(p, &st) != DSM_OK || !real(st)) return 14;
    opts.tracking = DSM_TRACK_LOG_AND_PAGES;
    opts.page_tracker = DSM_PAGE_TRACKER_AUTO;
    if (dsm_alloc("pages/auto-both", 64u << 10, &opts, &p) != DSM_OK) return 15;
    if (dsm_status(p, &st) != DSM_OK || !real(st)) return 16;
    opts.tracking = DSM_TRACK_LOG;  // AUTO asks for nothing when no pages are tracked
    if (dsm_alloc("pages/auto-log", 64u << 10, &opts, &p) != DSM_OK) return 17;
    if (dsm_status(p, &st) != DSM_OK || st.page_tracker != DSM_PAGE_TRACKER_NONE) return 18;
    dsm_fini();
    return 0;
  });
  EXPECT_EQ(Reap(child, 30000), 0);
}

TEST(PageTrackingOptions, BadValuesAreRefusedWithAMessage) {
  DsmdProcess daemon({"--region-size", "16M"});
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  const pid_t child = Spawn([] {
    if (dsm_init(nullptr) != DSM_OK) return 10;
    dsm_alloc_opts opts{};
    opts.tracking = 7;
    void* p = nullptr;
    if (dsm_alloc("pages/bad", 4096, &opts, &p) != DSM_ERR_INVALID) return 11;
    if (std::strstr(dsm_last_error(), "dsm_tracking") == nullptr) return 12;
    opts.tracking = DSM_TRACK_PAGES;
    opts.page_tracker = 9;
    if (dsm_alloc("pages/bad", 4096, &opts, &p) != DSM_ERR_INVALID) return 13;
    if (std::strstr(dsm_last_error(), "DSM_PAGE_TRACKER_AUTO") == nullptr) return 15;
    opts.page_tracker = DSM_PAGE_TRACKER_AUTO + 1;
    if (dsm_alloc("pages/bad", 4096, &opts, &p) != DSM_ERR_INVALID) return 16;
    // Nothing was allocated by the refused calls: the name is still free.
    opts.page_tracker = 0;
    if (dsm_alloc("pages/bad", 4096, &opts, &p) != DSM_OK) return 14;
    dsm_fini();
    return 0;
  });
  EXPECT_EQ(Reap(child, 30000), 0);
}

// Explicit logging and page tracking in one program, and in one area.
struct MixBoard {
  std::atomic<bool> published{false};
  std::atomic<bool> reader_done{false};
};

TEST(PageTrackingOptions, LogAndPagesMix) {
  DsmdProcess daemon({"--region-size", "16M"});
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<MixBoard> b;
  const pid_t writer = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 10;
    dsm_alloc_opts both = TrackedOpts(DSM_PAGE_TRACKER_AUTO);
    both.tracking = DSM_TRACK_LOG_AND_PAGES;
    void *logged = nullptr, *mixed = nullptr;
    if (dsm_alloc("mix/logged", 1u << 20, nullptr, &logged) != DSM_OK) return 11;
    if (dsm_alloc("mix/both", 1u << 20, &both, &mixed) != DSM_OK) return 12;
    auto* l = static_cast<uint8_t*>(logged);
    auto* m = static_cast<uint8_t*>(mixed);
    l[10] = 1;  // not logged, not tracked: not part of the version
    l[5000] = 2;
    dsm_log(&l[5000], 1);
    m[64 * 3] = 3;           // a plain store, found by the tracker
    m[64 * 9 + 1] = 4;       // a store, logged too
    dsm_log(&m[64 * 9], 2);
    if (dsm_publish(logged) != DSM_OK || dsm_publish(mixed) != DSM_OK) return 13;
    dsm_area_status st{};
    dsm_status(mixed, &st);
    if (st.version != 1 || st.lines_changed != 2) return 14;
    b->published = true;
    testing::WaitFor([&] { return b->reader_done.load(); }, 20000);
    dsm_fini();
    return 0;
  });
  const pid_t reader = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 20;
    const void *logged = nullptr, *mixed = nullptr;
    if (dsm_attach("mix/logged", 10000, &logged, nullptr) != DSM_OK) return 21;
    if (dsm_attach("mix/both", 10000, &mixed, nullptr) != DSM_OK) return 22;
    testing::WaitFor([&] { return b->published.load(); }, 20000);
    if (dsm_wait_version(logged, 1, 5000) != DSM_OK || dsm_wait_version(mixed, 1, 5000) != DSM_OK) {
      return 23;
    }
    const auto* l = static_cast<const uint8_t*>(logged);
    const auto* m = static_cast<const uint8_t*>(mixed);
    const int rc = l[10] == 0 && l[5000] == 2 && m[64 * 3] == 3 && m[64 * 9 + 1] == 4 ? 0 : 24;
    b->reader_done = true;
    dsm_fini();
    return rc;
  });
  EXPECT_EQ(Reap(reader, 30000), 0);
  EXPECT_EQ(Reap(writer, 30000), 0);
}

}  // namespace
}  // namespace dsm
