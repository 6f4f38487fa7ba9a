// One writer, two reader processes, one daemon: >= 1000 versions of a 16 MiB
// area in which every 8-byte word holds the number of the version that wrote it.
// Readers must only ever see uniform snapshots whose value is their version, in
// increasing order, and end byte-for-byte equal to the writer (XXH3).
// Then sparse versions (1% of the lines each) on three buffers, where after
// each publish the writer brings the spare no reader holds up to date ahead of
// the next one: a fast and a slow reader (which keeps its buffer pinned a
// while, so that spare is sometimes taken) must see each version exactly as
// the writer hashed it. Last, a writer with no reader on its host, whose
// versions dsmd writes in place, until a reader attaches.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"
#include "tests/support/dsm_helpers.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using testing::DsmdProcess;
using testing::Reap;
using testing::Shared;
using testing::Spawn;

constexpr size_t kAreaBytes = 16u << 20;
constexpr size_t kWords = kAreaBytes / sizeof(uint64_t);
constexpr uint64_t kVersions = 1000;
constexpr int kReaders = 2;

struct ReaderReport {
  uint64_t snapshots = 0;
  uint64_t distinct_versions = 0;
  uint64_t torn = 0;       // snapshots whose words disagree, or disagree with the version
  uint64_t backwards = 0;  // version lower than one seen before
  uint64_t final_version = 0;
  uint64_t final_hash = 0;
};

struct Board {
  std::atomic<bool> writer_done{false};
  std::atomic<int> readers_finished{0};
  uint64_t writer_version = 0;
  uint64_t writer_hash = 0;
  uint64_t busy_publishes = 0;
  ReaderReport readers[kReaders];
};

int Writer(Board* board) {
  if (dsm_init(nullptr) != DSM_OK) return 10;
  void* p = nullptr;
  if (dsm_alloc("versions/area", kAreaBytes, nullptr, &p) != DSM_OK) return 11;
  auto* words = static_cast<uint64_t*>(p);
  for (uint64_t v = 1; v <= kVersions; ++v) {
    for (size_t i = 0; i < kWords; ++i) words[i] = v;
    if (dsm_log(p, kAreaBytes) != DSM_OK) return 12;
    // A reader holding the spare buffer makes publish return BUSY: it never
    // blocks the writer, which simply tries again a little later.
    int rc;
    for (int attempt = 0; (rc = dsm_publish(p)) == DSM_ERR_BUSY && attempt < 100000; ++attempt) {
      ++board->busy_publishes;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (rc != DSM_OK || dsm_version(p) != v) return 13;
  }
  board->writer_version = dsm_version(p);
  board->writer_hash = XXH3_64bits(p, kAreaBytes);
  board->writer_done = true;
  // Stay alive until the readers have finished, so the area stays live.
  testing::WaitFor([&] { return board->readers_finished == kReaders; }, 60000);
  dsm_fini();
  return 0;
}

int Reader(Board* board, int id) {
  if (dsm_init(nullptr) != DSM_OK) return 20;
  const void* p = nullptr;
  size_t size = 0;
  if (dsm_attach("versions/area", 10000, &p, &size) != DSM_OK || size != kAreaBytes) return 21;
  const auto* words = static_cast<const uint64_t*>(p);
  ReaderReport& r = board->readers[id];
  uint64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v < last) ++r.backwards;
    if (v != last) ++r.distinct_versions;
    last = v;
    ++r.snapshots;
    // Version 0 is the zero-filled area before the first publish.
    for (size_t i = 0; i < kWords; ++i) {
      if (words[i] != v) {
        ++r.torn;
        break;
      }
    }
    if (board->writer_done && v == board->writer_version) break;
  }
  r.final_version = dsm_version(p);
  r.final_hash = XXH3_64bits(p, kAreaBytes);
  ++board->readers_finished;
  dsm_fini();
  return 0;
}

// Runs `writer()` and `reader(i)` for each of the kReaders in child processes
// against `daemon`; once the readers exited, `between()` runs (the writer is
// still up), then the writer is reaped. Each child must exit 0.
template <typename WriterFn, typename ReaderFn, typename BetweenFn>
void RunWriterAndReaders(const DsmdProcess& daemon, WriterFn writer, ReaderFn reader,
                         BetweenFn between) {
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  const pid_t w = Spawn(writer);
  pid_t readers[kReaders];
  for (int i = 0; i < kReaders; ++i) readers[i] = Spawn([&, i] { return reader(i); });
  for (pid_t r : readers) EXPECT_EQ(Reap(r, 90000), 0);
  between();
  EXPECT_EQ(Reap(w, 90000), 0);
}

TEST(Versions, ReadersSeeOnlyCompleteVersionsInOrder) {
  DsmdProcess daemon({"--region-size", "256M"});
  Shared<Board> board;
  RunWriterAndReaders(
      daemon, [&] { return Writer(&*board); }, [&](int i) { return Reader(&*board, i); }, [] {});

  EXPECT_EQ(board->writer_version, kVersions);
  for (const ReaderReport& r : board->readers) {
    EXPECT_EQ(r.torn, 0u);
    EXPECT_EQ(r.backwards, 0u);
    EXPECT_GT(r.distinct_versions, 10u) << "readers should follow many versions";
    EXPECT_EQ(r.final_version, kVersions);
    EXPECT_EQ(r.final_hash, board->writer_hash);
  }
  std::printf("readers saw %lu and %lu distinct versions in %lu and %lu snapshots; writer "
              "retried %lu busy publishes\n",
              static_cast<unsigned long>(board->readers[0].distinct_versions),
              static_cast<unsigned long>(board->readers[1].distinct_versions),
              static_cast<unsigned long>(board->readers[0].snapshots),
              static_cast<unsigned long>(board->readers[1].snapshots),
              static_cast<unsigned long>(board->busy_publishes));
}

// ---- Sparse versions: spares caught up ahead of the next publish ----------

constexpr size_t kSparseBytes = 4u << 20;
constexpr size_t kSparseLines = kSparseBytes / 64;
constexpr uint64_t kSparseVersions = 800;
constexpr size_t kSparseLinesPerVersion = kSparseLines / 100;

struct SparseReport {
  uint64_t versions_checked = 0;
  uint64_t mismatched = 0;  // a version whose bytes differ from the writer's at that version
  uint64_t backwards = 0;
  uint64_t final_version = 0;
};

struct SparseBoard {
  std::atomic<uint64_t> hash[kSparseVersions + 1];  // the writer's XXH3 of each version
  std::atomic<bool> writer_done{false};
  std::atomic<bool> writer_may_exit{false};
  std::atomic<int> readers_finished{0};
  SparseReport readers[kReaders];
};

// Version `v` of a sparse area: kSparseLinesPerVersion random lines, each
// word stamped with v and its place, logged; `*hash` gets the writer's XXH3
// of the version, then it is published. Returns 0 or a child's exit code.
int PublishSparseVersion(void* p, uint64_t v, std::mt19937_64& rng, std::atomic<uint64_t>* hash) {
  auto* words = static_cast<uint64_t*>(p);
  for (size_t n = 0; n < kSparseLinesPerVersion; ++n) {
    const size_t line = rng() % kSparseLines;
    for (size_t w = 0; w < 8; ++w) words[line * 8 + w] = v * 1000003 + line * 8 + w;
    if (dsm_log(&words[line * 8], 64) != DSM_OK) return 12;
  }
  hash->store(XXH3_64bits(p, kSparseBytes));
  if (testing::PublishRetrying(p) != DSM_OK || dsm_version(p) != v) return 13;
  return 0;
}

int SparseWriter(SparseBoard* b) {
  if (dsm_init(nullptr) != DSM_OK) return 10;
  // Three buffers: right after a publish the readers are still on the version
  // before (one buffer), so the third is free to catch up. With two, only
  // dsmd shipping to other hosts leaves the spare free that early.
  dsm_alloc_opts opts{};
  opts.reader_buffers = 3;
  void* p = nullptr;
  if (dsm_alloc("versions/sparse", kSparseBytes, &opts, &p) != DSM_OK) return 11;
  std::mt19937_64 rng(11);
  for (uint64_t v = 1; v <= kSparseVersions; ++v) {
    if (const int rc = PublishSparseVersion(p, v, rng, &b->hash[v]); rc != 0) return rc;
  }
  b->writer_done = true;
  // Stay until the test has read the daemon's counters of the live area.
  testing::WaitFor([&] { return b->writer_may_exit.load(); }, 60000);
  dsm_fini();
  return 0;
}

// The slow reader holds each version's buffer pinned for a while (no
// dsm_service), so the writer often finds the spare it would catch up taken.
int SparseReader(SparseBoard* b, int id, uint32_t hold_us) {
  if (dsm_init(nullptr) != DSM_OK) return 20;
  const void* p = nullptr;
  if (dsm_attach("versions/sparse", 10000, &p, nullptr) != DSM_OK) return 21;
  SparseReport& r = b->readers[id];
  uint64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v < last) ++r.backwards;
    if (v != last && v != 0) {
      ++r.versions_checked;
      if (XXH3_64bits(p, kSparseBytes) != b->hash[v].load()) ++r.mismatched;
    }
    last = v;
    if (b->writer_done && v == kSparseVersions) break;
    if (hold_us) std::this_thread::sleep_for(std::chrono::microseconds(hold_us));
  }
  r.final_version = dsm_version(p);
  ++b->readers_finished;
  dsm_fini();
  return 0;
}

struct Publishes {
  uint64_t all = 0;
  uint64_t staged = 0;  // written by dsmd from the area's stage
};

// Runs the sparse writer and its readers against a dsmd started with
// `daemon_args`; returns how the area's versions were published.
Publishes SparseVersionsStayWhole(std::vector<std::string> daemon_args) {
  daemon_args.insert(daemon_args.begin(), {"--region-size", "64M"});
  DsmdProcess daemon(daemon_args);
  Shared<SparseBoard> board;
  nlohmann::json status;
  RunWriterAndReaders(
      daemon, [&] { return SparseWriter(&*board); },
      [&](int i) { return SparseReader(&*board, i, i == 0 ? 0 : 700); },
      [&] {
        // The daemon's counters of the area while its writer is still up.
        const char* dsmctl = std::getenv("DSM_DSMCTL");
        status = nlohmann::json::parse(
            testing::Capture(std::string(dsmctl ? dsmctl : "dsmctl") + " --socket " +
                             daemon.socket_path() + " --json areas 2>/dev/null"),
            nullptr, false);
        board->writer_may_exit = true;
      });

  for (const SparseReport& r : board->readers) {
    EXPECT_EQ(r.mismatched, 0u) << "a reader saw a version other than the writer's";
    EXPECT_EQ(r.backwards, 0u);
    EXPECT_GT(r.versions_checked, 10u);
    EXPECT_EQ(r.final_version, kSparseVersions);
  }
  EXPECT_FALSE(status.is_discarded()) << "dsmctl --json areas";
  if (status.is_discarded()) return {};
  uint64_t caught_up = 0, published = 0, publishes = 0, staged = 0;
  for (const auto& a : status["areas"]) {
    if (a["name"] == "versions/sparse") {
      caught_up = a["bytes_caught_up"].get<uint64_t>();
      published = a["bytes_published"].get<uint64_t>();
      publishes = a["publishes"].get<uint64_t>();
      staged = a["staged_publishes"].get<uint64_t>();
    }
  }
  EXPECT_GT(publishes, 10u);
  // Without the catch-up, each publish copies its own lines and those of the
  // version before (the spare missed them): all of it on the readers' path.
  EXPECT_GT(caught_up, 0u) << "no spare was ever brought up to date ahead of a publish";
  EXPECT_LT(caught_up, published);
  std::printf("readers checked %lu and %lu versions; %lu of %lu bytes copied ahead\n",
              static_cast<unsigned long>(board->readers[0].versions_checked),
              static_cast<unsigned long>(board->readers[1].versions_checked),
              static_cast<unsigned long>(caught_up), static_cast<unsigned long>(published));
  return {publishes, staged};
}

TEST(Versions, SparseVersionsStayWholeWhileSparesCatchUpAhead) {
  // dsmd --no-stages: the writer writes the buffers itself.
  const Publishes p = SparseVersionsStayWhole({"--no-stages"});
  EXPECT_EQ(p.staged, 0u) << "a version went through a stage";
}

TEST(Versions, SparseVersionsStayWholeWhenDsmdWritesThemFromTheStage) {
  // The default: the writer logs explicitly, so every version goes through the stage.
  const Publishes p = SparseVersionsStayWhole({});
  EXPECT_EQ(p.staged, p.all) << "not every version went through the stage";
}

// ---- A writer alone on its host: dsmd writes its versions in place --------

constexpr uint64_t kAloneVersions = 600;
constexpr uint64_t kAloneFirstPart = 300;

struct AloneBoard {
  std::atomic<uint64_t> hash[kAloneVersions + 1];  // the writer's XXH3 of each version
  std::atomic<bool> first_part_done{false};
  std::atomic<bool> reader_attached{false};
  std::atomic<bool> writer_done{false};
  std::atomic<bool> writer_may_exit{false};
  uint64_t attach_version = 0;
  bool attach_version_whole = false;
  SparseReport reader;
};

// Sparse versions, as SparseWriter's; after the first part it waits for a
// reader to attach, then publishes the rest.
int AloneWriter(AloneBoard* b) {
  if (dsm_init(nullptr) != DSM_OK) return 10;
  void* p = nullptr;
  if (dsm_alloc("versions/alone", kSparseBytes, nullptr, &p) != DSM_OK) return 11;
  std::mt19937_64 rng(12);
  for (uint64_t v = 1; v <= kAloneVersions; ++v) {
    if (v == kAloneFirstPart + 1) {
      b->first_part_done = true;
      if (!testing::WaitFor([&] { return b->reader_attached.load(); }, 60000)) return 14;
    }
    if (const int rc = PublishSparseVersion(p, v, rng, &b->hash[v]); rc != 0) return rc;
  }
  b->writer_done = true;
  testing::WaitFor([&] { return b->writer_may_exit.load(); }, 60000);
  dsm_fini();
  return 0;
}

int AloneReader(AloneBoard* b) {
  if (dsm_init(nullptr) != DSM_OK) return 20;
  const void* p = nullptr;
  if (dsm_attach("versions/alone", 10000, &p, nullptr) != DSM_OK) return 21;
  b->attach_version = dsm_version(p);
  b->attach_version_whole = XXH3_64bits(p, kSparseBytes) == b->hash[b->attach_version].load();
  b->reader_attached = true;
  SparseReport& r = b->reader;
  uint64_t last = b->attach_version;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v < last) ++r.backwards;
    if (v != last) {
      ++r.versions_checked;
      if (XXH3_64bits(p, kSparseBytes) != b->hash[v].load()) ++r.mismatched;
    }
    last = v;
    if (b->writer_done && v == kAloneVersions) break;
  }
  r.final_version = dsm_version(p);
  dsm_fini();
  return 0;
}

// The counters `dsmctl --json areas` shows for area `name` (null if none).
nlohmann::json AreaCounters(const DsmdProcess& daemon, const std::string& name) {
  const char* dsmctl = std::getenv("DSM_DSMCTL");
  const nlohmann::json status = nlohmann::json::parse(
      testing::Capture(std::string(dsmctl ? dsmctl : "dsmctl") + " --socket " +
                       daemon.socket_path() + " --json areas 2>/dev/null"),
      nullptr, false);
  if (status.is_discarded()) return nullptr;
  for (const auto& a : status["areas"]) {
    if (a["name"] == name) return a;
  }
  return nullptr;
}

TEST(Versions, AWriterAloneOnItsHostHasItsVersionsWrittenInPlaceUntilAReaderAttaches) {
  DsmdProcess daemon({"--region-size", "64M"});
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<AloneBoard> board;
  const pid_t w = Spawn([&] { return AloneWriter(&*board); });
  ASSERT_TRUE(testing::WaitFor([&] { return board->first_part_done.load(); }, 60000));
  // dsmd writes the last version of the first part soon after its post.
  nlohmann::json before;
  testing::WaitFor(
      [&] {
        before = AreaCounters(daemon, "versions/alone");
        return !before.is_null() && before["staged_publishes"].get<uint64_t>() == kAloneFirstPart;
      },
      10000);
  ASSERT_FALSE(before.is_null()) << "dsmctl --json areas";
  // Nobody read the area: every version went into the latest buffer, and no
  // spare was kept up with them.
  EXPECT_EQ(before["staged_publishes"].get<uint64_t>(), kAloneFirstPart);
  EXPECT_EQ(before["staged_in_place"].get<uint64_t>(), kAloneFirstPart);
  EXPECT_EQ(before["bytes_caught_up"].get<uint64_t>(), 0u);

  const pid_t r = Spawn([&] { return AloneReader(&*board); });
  EXPECT_EQ(Reap(r, 90000), 0);
  const nlohmann::json after = AreaCounters(daemon, "versions/alone");
  board->writer_may_exit = true;
  EXPECT_EQ(Reap(w, 90000), 0);

  // The reader found the buffer written in place whole, and every version
  // after, which went to spares, too.
  EXPECT_EQ(board->attach_version, kAloneFirstPart);
  EXPECT_TRUE(board->attach_version_whole) << "the version a reader attached to differs";
  EXPECT_EQ(board->reader.mismatched, 0u) << "a reader saw a version other than the writer's";
  EXPECT_EQ(board->reader.backwards, 0u);
  EXPECT_GT(board->reader.versions_checked, 10u);
  EXPECT_EQ(board->reader.final_version, kAloneVersions);
  ASSERT_FALSE(after.is_null()) << "dsmctl --json areas";
  EXPECT_EQ(after["staged_publishes"].get<uint64_t>(), kAloneVersions);
  EXPECT_EQ(after["staged_in_place"].get<uint64_t>(), kAloneFirstPart)
      << "a version went in place while a reader was attached";
}

}  // namespace
}  // namespace dsm
