#include "tests/multihost/line_check_workload.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"

namespace dsm::testing::line_check {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kStampMagic = 0x6c696e65636865ULL;  // "linechk" without the k
// How long readers may take to attach, which includes the first transfer of
// the whole area to their hosts (64 MiB: seconds on an idle machine, more on
// one whose 2 cores also compile), and how long the writer waits for them.
constexpr int kAttachTimeoutMs = 60000;

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The 64 bytes `step` writes into `line`. Words 0 and 1 name the step and the
// line in clear, so a wrong line tells where its bytes came from; the rest
// depend on (seed, line, step), so bytes no write produced do not pass for one.
void Content(uint64_t seed, uint64_t line, uint64_t step, uint64_t w[8]) {
  w[0] = step;
  w[1] = line;
  const uint64_t h = SplitMix(seed ^ SplitMix((line << 32) | step));
  for (uint64_t k = 2; k < 8; ++k) w[k] = (h + k) * 0x9e3779b97f4a7c15ULL;
}

bool IsContent(uint64_t seed, uint64_t line, uint64_t step, const uint64_t* got) {
  uint64_t want[8];
  Content(seed, line, step, want);
  return std::memcmp(want, got, kLine) == 0;
}

// Line 0 of every version: the last step it includes, the run's seed, and the
// version number the writer's publish of it will get.
struct Stamp {
  uint64_t step;
  uint64_t seed;
  uint64_t version;
  uint64_t magic;
  uint64_t zero[4];
};
static_assert(sizeof(Stamp) == kLine);

size_t LinesPerStep(const Options& o) {
  const size_t lines = o.area_bytes / kLine;
  return std::max<size_t>(1, static_cast<size_t>(o.dirty_fraction * static_cast<double>(lines)));
}

// The lines step after step writes: writer and readers draw them from the
// same generator, in the same order (a line drawn twice is written twice).
class Picker {
 public:
  explicit Picker(const Options& o)
      : rng_(o.seed), pick_(1, o.area_bytes / kLine - 1), per_step_(LinesPerStep(o)) {}
  template <typename F>
  void NextStep(F&& f) {
    for (size_t i = 0; i < per_step_; ++i) f(pick_(rng_));
  }

 private:
  std::mt19937_64 rng_;
  std::uniform_int_distribution<size_t> pick_;
  size_t per_step_;
};

bool Init(const std::string& socket) {
  dsm_init_opts opts{};
  opts.socket_path = socket.c_str();
  return dsm_init(&opts) == DSM_OK;
}

// A reader's model of the writer: the last step that wrote each line (and the
// kHistory writes before it), advanced step by step to a snapshot's step.
class Model {
 public:
  explicit Model(const Options& o)
      : o_(o),
        lines_(o.area_bytes / kLine),
        picker_(o),
        last_(lines_, 0),
        history_(lines_ * kHistory, 0) {}

  uint64_t step() const { return step_; }

  void AdvanceTo(uint64_t step) {
    while (step_ < step) {
      const auto s = static_cast<uint32_t>(++step_);
      picker_.NextStep([&](size_t line) {
        if (last_[line] == s) return;
        uint32_t* h = &history_[line * kHistory];
        std::memmove(h + 1, h, (kHistory - 1) * sizeof(uint32_t));
        h[0] = last_[line];
        last_[line] = s;
      });
    }
  }

  // Checks every line but the stamp against the model (at the stamp's step).
  void Check(const uint8_t* bytes, SnapshotMismatch* m) const {
    static constexpr uint64_t kZero[8] = {};
    for (size_t line = 1; line < lines_; ++line) {
      const auto* got = reinterpret_cast<const uint64_t*>(bytes + line * kLine);
      const uint64_t expected = last_[line];
      uint64_t want[8];
      if (expected == 0) {
        std::memcpy(want, kZero, kLine);
      } else {
        Content(o_.seed, line, expected, want);
      }
      if (std::memcmp(want, got, kLine) == 0) continue;
      const LineMismatch lm = Classify(line, got);
      ++m->lines;
      switch (lm.found) {
        case Found::kOlderWrite:
          ++m->older;
          break;
        case Found::kLaterWrite:
          ++m->later;
          break;
        case Found::kOtherLine:
          ++m->other_line;
          break;
        case Found::kNeverHad:
          ++m->never_had;
          break;
      }
      // Keep the first lines, but make room for the first of bytes no
      // version had: the rarest, most telling kind.
      if (m->kept < kLinesKept) {
        m->first[m->kept++] = lm;
      } else if (lm.found == Found::kNeverHad && m->never_had == 1) {
        m->first[kLinesKept - 1] = lm;
      }
    }
  }

 private:
  LineMismatch Classify(size_t line, const uint64_t* got) const {
    LineMismatch lm;
    lm.line = line;
    lm.expected_step = last_[line];
    const uint64_t found_step = got[0];
    const uint64_t found_line = got[1];
    const bool zeros = std::all_of(got, got + 8, [](uint64_t w) { return w == 0; });
    const uint32_t* h = &history_[line * kHistory];
    if (zeros || (found_line == line && found_step >= 1 && found_step <= o_.steps &&
                  IsContent(o_.seed, line, found_step, got))) {
      lm.found_step = zeros ? 0 : found_step;
      lm.found_line = line;
      if (lm.found_step < lm.expected_step) {
        lm.found = Found::kOlderWrite;
        lm.in_history = std::find(h, h + kHistory, lm.found_step) != h + kHistory;
      } else {
        // Between the expected write and the snapshot's step nothing wrote
        // the line: such bytes were never in any version.
        lm.found = lm.found_step > step_ ? Found::kLaterWrite : Found::kNeverHad;
      }
    } else if (found_line >= 1 && found_line < lines_ && found_step >= 1 &&
               found_step <= o_.steps && IsContent(o_.seed, found_line, found_step, got)) {
      lm.found = Found::kOtherLine;
      lm.found_step = found_step;
      lm.found_line = found_line;
    } else {
      lm.found = Found::kNeverHad;
    }
    return lm;
  }

  const Options& o_;
  size_t lines_;
  Picker picker_;
  uint64_t step_ = 0;
  std::vector<uint32_t> last_;
  std::vector<uint32_t> history_;  // kHistory per line, newest first; 0: none
};

}  // namespace

const char* FoundName(Found f) {
  switch (f) {
    case Found::kOlderWrite:
      return "an older write";
    case Found::kLaterWrite:
      return "a later write";
    case Found::kOtherLine:
      return "another line";
    case Found::kNeverHad:
      return "bytes no version ever had";
  }
  return "?";
}

int RunWriter(const std::string& socket, const Options& o, Board* b) {
  if (!Init(socket)) return b->writer_rc = 10;
  void* p = nullptr;
  if (dsm_alloc(o.area_name.c_str(), o.area_bytes, nullptr, &p) != DSM_OK) return b->writer_rc = 11;
  b->allocated = true;
  // The readers' hosts subscribe when they attach: from then on every version
  // is exported, the first one whole.
  if (o.readers_join_at_step == 0 &&
      !WaitFor([&] { return b->readers_attached.load() >= kReaders || b->writer_stop; },
               kAttachTimeoutMs)) {
    return b->writer_rc = 12;
  }
  auto* bytes = static_cast<uint8_t*>(p);
  Picker picker(o);
  const auto period = std::chrono::microseconds(o.period_us);
  const uint64_t t0 = NowNs();
  auto next = Clock::now();
  for (uint64_t s = 1; s <= o.steps && !b->writer_stop; ++s) {
    picker.NextStep([&](size_t line) {
      uint64_t w[8];
      Content(o.seed, line, s, w);
      std::memcpy(bytes + line * kLine, w, kLine);
      dsm_log(bytes + line * kLine, kLine);
    });
    // A refused publish adds no version, so the next one is still this number.
    const Stamp stamp{s, o.seed, dsm_version(p) + 1, kStampMagic, {}};
    std::memcpy(bytes, &stamp, sizeof(stamp));
    dsm_log(bytes, sizeof(stamp));
    // Once per step, as a training loop would: a busy refusal leaves the
    // changes logged for the next step's publish (no retrying here, which
    // would hide the versions that carry several steps).
    b->in_publish = true;
    const int rc = dsm_publish(p);
    b->in_publish = false;
    if (rc == DSM_OK) b->writer_done_ns = NowNs();
    if (rc == DSM_ERR_BUSY) {
      ++b->busy;
    } else if (rc != DSM_OK) {
      return b->writer_rc = 13;
    }
    b->writer_step = s;
    // A 2 ms cadence; a step that ran late does not make the next ones hurry.
    next += period;
    const auto now = Clock::now();
    if (next < now) {
      next = now;
    } else {
      std::this_thread::sleep_until(next);
    }
  }
  // The last step's changes may still be logged: they go now (an empty log
  // publishes nothing and returns DSM_OK).
  int rc = DSM_ERR_BUSY;
  const uint64_t before = dsm_version(p);
  for (uint64_t tries = 0; rc == DSM_ERR_BUSY && tries < 20000; ++tries) {
    rc = dsm_publish(p);
    if (rc == DSM_ERR_BUSY) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (rc != DSM_OK) return b->writer_rc = 14;
  if (dsm_version(p) != before) b->writer_done_ns = NowNs();
  b->writer_ns = NowNs() - t0;
  b->writer_hash = XXH3_64bits(p, o.area_bytes);
  b->writer_version = dsm_version(p);
  b->writer_done = true;
  // Stay, the area live, until the readers are done (bounded by their timeout).
  const auto until = Clock::now() + std::chrono::seconds(o.reader_timeout_s + 60);
  while (!b->writer_may_exit && b->readers_done < kReaders && Clock::now() < until) {
    dsm_service();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return b->writer_rc = dsm_fini() == DSM_OK ? 0 : 15;
}

// Waits for the writer to reach the joining step (if any), then attaches,
// timing dsm_attach. Returns 0, 1 (the attach failed or the size is wrong) or
// 3 (the writer never reached the step).
int JoinAndAttach(const Options& o, Board* b, const void** p, int* attach_rc, uint64_t* attach_ns) {
  if (o.readers_join_at_step > 0 &&
      !WaitFor([&] { return b->writer_step.load() >= o.readers_join_at_step || b->writer_done; },
               kAttachTimeoutMs)) {
    return 3;
  }
  size_t size = 0;
  const uint64_t attach_start = NowNs();
  *attach_rc = dsm_attach(o.area_name.c_str(), kAttachTimeoutMs, p, &size);
  *attach_ns = NowNs() - attach_start;
  return *attach_rc != DSM_OK || size != o.area_bytes ? 1 : 0;
}

int RunReader(const std::string& socket, int id, const Options& o, Board* b) {
  ReaderReport& r = b->readers[id];
  if (!Init(socket)) return 20;
  const void* p = nullptr;
  if (const int rc = JoinAndAttach(o, b, &p, &r.attach_rc, &r.attach_ns); rc != 0) return 20 + rc;
  ++b->readers_attached;
  const auto* bytes = static_cast<const uint8_t*>(p);
  Model model(o);
  uint64_t last_version = 0;
  uint64_t seen_ns = 0;  // when last_version was first seen
  const auto deadline = Clock::now() + std::chrono::seconds(o.reader_timeout_s);
  bool done = false;
  while (!done && Clock::now() < deadline) {
    // The snapshot holds still from here to the next dsm_service.
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v != last_version && v > 0) {
      if (v < last_version) ++r.backwards_versions;
      last_version = v;
      seen_ns = NowNs();
      Stamp stamp;
      std::memcpy(&stamp, bytes, sizeof(stamp));
      const bool stamp_ok =
          stamp.magic == kStampMagic && stamp.seed == o.seed && stamp.step >= 1 &&
          stamp.step <= o.steps &&
          std::all_of(stamp.zero, stamp.zero + 4, [](uint64_t w) { return w == 0; });
      if (!stamp_ok) {
        ++r.bad_stamps;
      } else if (stamp.step < model.step()) {
        // The model only goes forward (versions only increase, so do steps).
        ++r.backwards_steps;
      } else {
        if (stamp.version != v) ++r.stamp_version_mismatches;
        const uint64_t t0 = NowNs();
        model.AdvanceTo(stamp.step);
        SnapshotMismatch m;
        model.Check(bytes, &m);
        r.check_ns += NowNs() - t0;
        ++r.snapshots_checked;
        if (m.lines > 0) {
          m.version = v;
          m.step = stamp.step;
          if (r.mismatching_snapshots < kSnapshotsKept) r.mismatches[r.mismatching_snapshots] = m;
          ++r.mismatching_snapshots;
          r.mismatching_lines += m.lines;
        }
      }
    }
    done = b->writer_done && v >= b->writer_version.load();
    if (done) {
      r.catch_up_ns = seen_ns > b->writer_done_ns ? seen_ns - b->writer_done_ns : 0;
    } else if (id % 2 == 1) {
      // Odd readers sleep in dsm_wait_version, so that dsmd writes versions
      // in place into the buffer they map while they sleep.
      dsm_wait_version(p, last_version + 1, 2);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  r.timed_out = !done;
  r.final_version = dsm_version(p);
  Stamp stamp;
  std::memcpy(&stamp, bytes, sizeof(stamp));
  r.final_step = stamp.step;
  r.final_hash = XXH3_64bits(p, o.area_bytes);
  ++b->readers_done;
  return dsm_fini() == DSM_OK ? 0 : 22;
}

int RunWatcher(const std::string& socket, int id, const Options& o, Board* b) {
  WatcherReport& w = b->watchers[id];
  if (!Init(socket)) return 30;
  const void* p = nullptr;
  if (const int rc = JoinAndAttach(o, b, &p, &w.attach_rc, &w.attach_ns); rc != 0) return 30 + rc;
  uint64_t last_version = 0;
  uint64_t seen_ns = 0;  // when last_version was first seen
  const auto deadline = Clock::now() + std::chrono::seconds(o.reader_timeout_s);
  bool done = false;
  while (!done && Clock::now() < deadline) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v != last_version) {
      last_version = v;
      seen_ns = NowNs();
      ++w.versions_seen;
    }
    done = b->writer_done && v >= b->writer_version.load();
    if (!done) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  w.timed_out = !done;
  if (done) w.catch_up_ns = seen_ns > b->writer_done_ns ? seen_ns - b->writer_done_ns : 0;
  return dsm_fini() == DSM_OK ? 0 : 32;
}

std::string Describe(const ReaderReport& r) {
  std::ostringstream out;
  const auto shown = std::min<uint64_t>(r.mismatching_snapshots, kSnapshotsKept);
  for (uint64_t i = 0; i < shown; ++i) {
    const SnapshotMismatch& m = r.mismatches[i];
    out << "  version " << m.version << " (step " << m.step << "): " << m.lines
        << " lines wrong: " << m.older << " hold an older write, " << m.later << " a later write, "
        << m.other_line << " another line's, " << m.never_had << " bytes no version ever had\n";
    for (int k = 0; k < m.kept; ++k) {
      const LineMismatch& l = m.first[k];
      out << "    line " << l.line << ": expected step " << l.expected_step << "'s write";
      switch (l.found) {
        case Found::kOlderWrite:
          if (l.found_step == 0) {
            out << ", holds the zeros it started with";
          } else {
            out << ", holds step " << l.found_step << "'s write";
          }
          out << (l.in_history ? "" : " (not among its last writes before)");
          break;
        case Found::kLaterWrite:
          out << ", holds step " << l.found_step << "'s (after the snapshot's)";
          break;
        case Found::kOtherLine:
          out << ", holds line " << l.found_line << "'s write of step " << l.found_step;
          break;
        case Found::kNeverHad:
          out << ", holds " << FoundName(l.found);
          break;
      }
      out << "\n";
    }
  }
  if (r.mismatching_snapshots > shown) {
    out << "  ... and " << r.mismatching_snapshots - shown << " more snapshots with wrong lines\n";
  }
  return out.str();
}

}  // namespace dsm::testing::line_check
