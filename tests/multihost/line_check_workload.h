// The line-check workload: a writer changes 1% of an area's lines (a seeded
// random set, different at every step) every 2 ms with dsm_log and publishes
// once per step, letting a refused (busy) publish ride with the next one;
// readers on other hosts check every line of every snapshot they see against
// what the writer wrote up to the step stamped in line 0. Each line's content
// is a function of (seed, line, step) that names its line and step, so a wrong
// line says where its bytes came from: an older or later write of the line,
// another line, or nothing any version ever held.
#ifndef DSM_TESTS_MULTIHOST_LINE_CHECK_WORKLOAD_H_
#define DSM_TESTS_MULTIHOST_LINE_CHECK_WORKLOAD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dsm::testing::line_check {

inline constexpr size_t kLine = 64;
inline constexpr int kReaders = 2;
// Mismatching snapshots described in full per reader, and lines per snapshot.
inline constexpr int kSnapshotsKept = 4;
inline constexpr int kLinesKept = 6;
// Earlier writes of each line a reader remembers, to name a stale line's write.
inline constexpr int kHistory = 3;

struct Options {
  std::string area_name = "lc/area";
  size_t area_bytes = 16u << 20;
  uint64_t steps = 3000;
  uint64_t seed = 1;
  double dirty_fraction = 0.01;
  uint32_t period_us = 2000;  // the writer's cadence
  int reader_timeout_s = 120;
  // 0: the writer waits for the readers to attach before its first step, so
  // their first version is the whole area before any step. N > 0: the writer
  // steps from the start and the readers attach once it has taken N steps, so
  // their first version arrives while the area keeps changing.
  uint64_t readers_join_at_step = 0;
  // Also run a watcher beside each reader: a process on the reader's host
  // that attaches at the same moment and only notes when each version
  // appears, so its times do not include the reader's checking.
  bool watch = false;
};

// Where a wrong line's bytes came from.
enum class Found : uint32_t {
  kOlderWrite,  // this line as written at an earlier step (0: the zeros it started with)
  kLaterWrite,  // this line as written at a step after the snapshot's
  kOtherLine,   // another line's content (found_line, found_step)
  kNeverHad,    // bytes no version ever had
};
const char* FoundName(Found f);

struct LineMismatch {
  uint64_t line = 0;
  uint64_t expected_step = 0;  // last step <= the snapshot's that wrote it (0: never)
  uint64_t found_step = 0;
  uint64_t found_line = 0;
  Found found = Found::kNeverHad;
  // For kOlderWrite: found_step is one of the last kHistory writes of the line
  // before expected_step (or 0 when the line had no earlier write).
  bool in_history = false;
};

struct SnapshotMismatch {
  uint64_t version = 0;
  uint64_t step = 0;
  uint64_t lines = 0;  // lines not as expected
  uint64_t older = 0;
  uint64_t later = 0;
  uint64_t other_line = 0;
  uint64_t never_had = 0;
  int kept = 0;
  LineMismatch first[kLinesKept];
};

struct ReaderReport {
  int attach_rc = 0;
  uint64_t snapshots_checked = 0;
  uint64_t check_ns = 0;                  // time spent checking snapshots
  uint64_t backwards_versions = 0;        // dsm_version lower than one seen before
  uint64_t backwards_steps = 0;           // a stamp's step lower than one seen before
  uint64_t bad_stamps = 0;                // line 0 not a stamp of this run
  uint64_t stamp_version_mismatches = 0;  // the stamp names another version than dsm_version
  uint64_t mismatching_snapshots = 0;
  uint64_t mismatching_lines = 0;  // summed over snapshots
  SnapshotMismatch mismatches[kSnapshotsKept];
  uint64_t final_version = 0;
  uint64_t final_step = 0;
  uint64_t final_hash = 0;
  bool timed_out = false;
  uint64_t attach_ns = 0;    // dsm_attach: time to the first version
  uint64_t catch_up_ns = 0;  // the writer's last version published -> first seen here
};

// What a watcher saw: when the first and the last version appeared.
struct WatcherReport {
  int attach_rc = 0;
  uint64_t attach_ns = 0;    // dsm_attach: time to the first version
  uint64_t catch_up_ns = 0;  // the writer's last version published -> first seen here
  uint64_t versions_seen = 0;
  bool timed_out = false;
};

struct Board {
  std::atomic<bool> allocated{false};
  std::atomic<int> readers_attached{0};
  std::atomic<int> readers_done{0};
  std::atomic<bool> writer_done{false};
  std::atomic<bool> writer_stop{false};      // no more steps (the test is ending early)
  std::atomic<bool> writer_may_exit{false};  // stop serving the last version
  std::atomic<bool> in_publish{false};       // the writer is in dsm_publish
  std::atomic<uint64_t> writer_step{0};
  std::atomic<uint64_t> writer_version{0};  // final once writer_done
  uint64_t busy = 0;         // publishes refused busy (their changes went with a later one)
  uint64_t writer_hash = 0;  // XXH3 of the whole area at the final version
  uint64_t writer_ns = 0;    // first step to the final version
  uint64_t writer_done_ns = 0;  // steady clock when the last version was published
  int writer_rc = 0;
  ReaderReport readers[kReaders];
  WatcherReport watchers[kReaders];
};

// Run in forked children; return 0 when they ran to the end (the board says
// what they saw).
int RunWriter(const std::string& socket, const Options& o, Board* b);
int RunReader(const std::string& socket, int id, const Options& o, Board* b);
int RunWatcher(const std::string& socket, int id, const Options& o, Board* b);

// One line per mismatching snapshot and line kept in `r`, for a failure message.
std::string Describe(const ReaderReport& r);

}  // namespace dsm::testing::line_check

#endif  // DSM_TESTS_MULTIHOST_LINE_CHECK_WORKLOAD_H_
