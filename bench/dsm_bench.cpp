// dsm-bench: the end-to-end replication benchmark (the "replicate" workload).
//
// One writer process on one host and R reader processes, one per other host,
// each talking to its own host's dsmd:
//
//   dsm-bench writer --socket H1.sock --board B --readers R [--size 64M] [--fraction 0.01]
//                    [--rounds N] [--seconds T] [--window 2] [--json OUT] ...
//   dsm-bench reader --socket Hk.sock --board B --id k-2
//   dsm-bench report --out results/bench/dsm-bench.json RUN.json...
//
// The writer allocates an area of S bytes, waits until every reader attached
// it by name, publishes it whole (version 1; PublishWhole says why in that
// order) and waits until every reader holds version 1. Then each
// round changes a fraction f of its 64-byte lines (uniform random, seeded; line
// 0 always, with the version number in it), logs them, and publishes one
// version. A round may start only when every reader sees the version `window`
// rounds back (window 1: lock step; 2: the next round is prepared and
// published while the previous one is on the wire, an SSP-style bound).
// Readers wait for each next version with dsm_wait_version and record when it
// became visible. Coordination and timestamps go through a small shared file
// (dsm_bench_board.h); CLOCK_MONOTONIC is one clock for all namespaces.
//
// Reported (human line on stdout, everything in --json): rounds/s and changed
// bytes/s from the writer's first measured publish to the last version visible
// at every reader; delivered bytes/s: the changed lines dsmd put on the wire
// (its changed_bytes_out counter; versions published faster than they ship
// are coalesced, so a line changed twice travels once); publish-to-visible
// latency p50/p99 over every (reader, version); frames and bytes on the wire
// per changed byte, from the dsmd counters (dsmctl --json) of the writer's
// host before and after the measured rounds. Given the raw frame throughput of
// the same device measured in the same run (bench/raw_throughput --json,
// --raw-json), the ratio delivered/raw and the targets below. Every run also
// checks correctness: each version a reader sees carries its number in line 0,
// and at the end every replica's XXH3 must equal the writer's (if not, the
// reader lists which lines differ and which versions they hold).
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/dsm_bench_board.h"
#include "bench/stage_breakdown.h"
#include "dsm/dsm.h"
#include "libdsm/contract/clock.h"

#ifndef DSM_BENCH_DEFAULT_DSMCTL
#define DSM_BENCH_DEFAULT_DSMCTL "dsmctl"
#endif

namespace dsm::bench {
namespace {

using json = nlohmann::json;

constexpr size_t kLine = 64;
constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kPollNs = 20'000;  // retry interval while dsm_publish is busy
// The longest the writer sleeps on the board between looks at failures and
// interrupts; readers wake it as soon as one moves on.
constexpr uint64_t kProgressWaitNs = 5 * 1'000'000;

volatile std::sig_atomic_t g_interrupted = 0;

void OnSignal(int) { g_interrupted = 1; }

void InstallSignals() {
  struct sigaction sa{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Short sleeps while polling the board should be short.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

void SleepNs(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

// A reader moved on: wake the writer if it waits for readers (WaitProgress).
void NotifyProgress(BoardHeader* h) {
  h->progress.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, &h->progress, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Sleeps until `progress` differs from `seen` (read before the readers'
// slots were checked), at most `timeout_ns`.
void WaitProgress(BoardHeader* h, uint32_t seen, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
              static_cast<long>(timeout_ns % 1'000'000'000)};
  syscall(SYS_futex, &h->progress, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

std::string LastError(int rc) {
  return std::string(dsm_strerror(rc)) + ": " + dsm_last_error();
}

bool InitSession(const std::string& socket, std::string* error) {
  dsm_init_opts opts{};
  opts.socket_path = socket.empty() ? nullptr : socket.c_str();
  const int rc = dsm_init(&opts);
  if (rc != DSM_OK) {
    *error = "dsm_init(" + socket + "): " + LastError(rc);
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Which lines change in a round: exactly k distinct lines, line 0 always.

class LineChooser {
 public:
  LineChooser(size_t lines, double fraction, uint64_t seed) : n_(lines), rng_(seed) {
    const double want = std::llround(fraction * static_cast<double>(lines));
    k_ = static_cast<size_t>(std::clamp(want, 1.0, static_cast<double>(lines)));
  }
  size_t per_round() const { return k_; }
  bool all() const { return k_ >= n_; }

  void Choose(std::vector<uint32_t>* out) {
    out->clear();
    out->push_back(0);
    const size_t need = k_ - 1;
    const size_t pool = n_ - 1;  // lines 1..n-1
    if (need == 0) return;
    if (need * 8 >= pool) {
      // Selection sampling (Knuth's algorithm S): one pass, ascending, uniform.
      std::uniform_real_distribution<double> u(0.0, 1.0);
      size_t chosen = 0;
      for (size_t i = 0; i < pool && chosen < need; ++i) {
        if (static_cast<double>(pool - i) * u(rng_) < static_cast<double>(need - chosen)) {
          out->push_back(static_cast<uint32_t>(i + 1));
          ++chosen;
        }
      }
    } else {
      // Sparse: draw until k distinct.
      if (mark_.size() != n_) mark_.assign(n_, 0);
      std::uniform_int_distribution<size_t> pick(1, pool);
      while (out->size() < k_) {
        const size_t i = pick(rng_);
        if (!mark_[i]) {
          mark_[i] = 1;
          out->push_back(static_cast<uint32_t>(i));
        }
      }
      for (uint32_t i : *out) mark_[i] = 0;
    }
  }

 private:
  size_t n_;
  size_t k_ = 1;
  std::mt19937_64 rng_;
  std::vector<uint8_t> mark_;
};

inline void StampLine(uint64_t* w, uint64_t version, uint64_t line) {
  for (uint64_t j = 0; j < 8; ++j) w[j] = (version << 40) ^ (line << 3) ^ j;
}

// A managed area holds floats that move a little at each change, as weights
// do in training, so that its lines rank by how far they moved. Deterministic
// in (version, line): any run of the same rounds ends with the same bytes.
inline void InitWeights(float* l, uint64_t line) {
  for (uint64_t j = 0; j < 16; ++j) l[j] = static_cast<float>((line * 16 + j) % 1000) * 1e-3f;
}
inline void MoveWeights(float* l, uint64_t version, uint64_t line) {
  for (uint64_t j = 0; j < 16; ++j) {
    const uint64_t x = XXH3_64bits_withSeed(&line, sizeof line, version * 16 + j);
    l[j] += static_cast<float>(static_cast<int64_t>(x % 20001) - 10000) * 1e-7f;
  }
}

// ---------------------------------------------------------------------------
// dsmd counters through dsmctl.

// dsmctl's JSON output for `args` (after --socket S --json).
json Dsmctl(const std::string& dsmctl, const std::string& socket, const std::string& args,
            std::string* error) {
  const std::string cmd = "'" + dsmctl + "' --socket '" + socket + "' --json " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) {
    *error = "cannot run " + cmd;
    return nullptr;
  }
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int status = pclose(f);
  if (status != 0) {
    *error = cmd + " failed: " + out.substr(0, 300);
    return nullptr;
  }
  try {
    return json::parse(out);
  } catch (const std::exception& e) {
    *error = "dsmctl output is not JSON: " + std::string(e.what());
    return nullptr;
  }
}

json Snapshot(const std::string& dsmctl, const std::string& socket, std::string* error) {
  return Dsmctl(dsmctl, socket, "all", error);
}

// after - before for every numeric counter ("dropped" summed over reasons too).
json CounterDelta(const json& before, const json& after) {
  json d = json::object();
  if (before.is_null() || after.is_null()) return d;
  const json& b = before["counters"];
  const json& a = after["counters"];
  for (const auto& [k, v] : a.items()) {
    if (k == "dropped") {
      uint64_t total = 0;
      json reasons = json::object();
      for (const auto& [r, n] : v.items()) {
        const uint64_t was = b.contains("dropped") && b["dropped"].contains(r)
                                 ? b["dropped"][r].get<uint64_t>() : 0;
        const uint64_t now = n.get<uint64_t>();
        if (now != was) reasons[r] = now - was;
        total += now - was;
      }
      d["dropped"] = total;
      d["dropped_by_reason"] = reasons;
    } else if (v.is_number_unsigned()) {
      const uint64_t was = b.contains(k) ? b[k].get<uint64_t>() : 0;
      d[k] = v.get<uint64_t>() - was;
    }
  }
  return d;
}

json AreaInfo(const json& snapshot, const std::string& name) {
  if (snapshot.is_null() || !snapshot.contains("areas")) return nullptr;
  for (const auto& a : snapshot["areas"]) {
    if (a.value("name", "") == name) {
      json x = a;
      x.erase("content");
      return x;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Statistics.

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

json LatencySummary(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double x : ms) sum += x;
  return {{"samples", ms.size()},
          {"p50", Percentile(ms, 50)},
          {"p90", Percentile(ms, 90)},
          {"p99", Percentile(ms, 99)},
          {"max", ms.empty() ? 0.0 : ms.back()},
          {"mean", ms.empty() ? 0.0 : sum / static_cast<double>(ms.size())}};
}

json Mean(const std::vector<uint64_t>& ns) {
  if (ns.empty()) return nullptr;
  double sum = 0;
  for (uint64_t x : ns) sum += static_cast<double>(x);
  return sum / static_cast<double>(ns.size()) / 1e6;
}

// raw_throughput --json output (one object per line; the receiver's).
// User + system CPU time process `pid` has used, in ms (0 once it is gone):
// every process of the virtual cluster is on this machine.
double ProcessCpuMs(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), {});
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos || name_end + 2 > stat.size()) return 0;
  std::istringstream fields(stat.substr(name_end + 2));  // from field 3 (state) on
  std::string skip;
  for (int field = 3; field < 14; ++field) fields >> skip;
  uint64_t utime = 0, stime = 0;  // fields 14 and 15, in clock ticks
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// tcp-fanout --json (the reference a user would write), or null.
json ReadTcp(const std::string& path) {
  if (path.empty()) return nullptr;
  std::ifstream in(path);
  if (!in) return nullptr;
  try {
    json j = json::parse(in);
    return j.value("tool", "") == "tcp-fanout" ? j : json(nullptr);
  } catch (const std::exception&) {
    return nullptr;
  }
}

json ReadRaw(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  std::string line;
  json found = nullptr;
  while (std::getline(in, line)) {
    const size_t brace = line.find('{');
    if (brace == std::string::npos) continue;
    try {
      json j = json::parse(line.substr(brace));
      if (j.is_object() && j.contains("gbit_per_sec")) found = j;
    } catch (const std::exception&) {
    }
  }
  return found;
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double l = 0;
  in >> l;
  return l;
}

// The version stamped into a line (StampLine), or UINT32_MAX if its words do
// not agree with each other (a torn line). Line 0 carries the version and the
// line count in its first words; only its stamped words are checked.
uint32_t LineVersion(const uint64_t* w, uint64_t line) {
  const uint64_t v = w[2] >> 40;
  for (uint64_t j = line == 0 ? 2 : 0; j < 8; ++j) {
    if (w[j] != ((v << 40) ^ (line << 3) ^ j)) return UINT32_MAX;
  }
  return static_cast<uint32_t>(v);
}

// For diagnosis when a replica's content differs: which lines, and which
// versions they hold compared with the writer's (from <board>.expect).
std::string DiffLines(const std::string& expect_path, const uint64_t* words, size_t lines) {
  std::ifstream in(expect_path, std::ios::binary);
  std::vector<uint32_t> expect(lines);
  if (!in.read(reinterpret_cast<char*>(expect.data()), static_cast<std::streamsize>(lines * 4))) {
    return "no " + expect_path + " to compare lines with";
  }
  uint64_t stale = 0, torn = 0, ahead = 0, runs = 0;
  std::string examples;
  bool in_run = false;
  for (size_t line = 0; line < lines; ++line) {
    const uint32_t got = LineVersion(words + line * 8, line);
    const bool bad = got != expect[line];
    if (bad) {
      if (got == UINT32_MAX) ++torn;
      else if (got < expect[line]) ++stale;
      else ++ahead;
      if (!in_run) ++runs;
      if (runs <= 6 && !in_run) {
        examples += " line " + std::to_string(line) + ": v" +
                    (got == UINT32_MAX ? std::string("torn") : std::to_string(got)) + " (writer v" +
                    std::to_string(expect[line]) + ")";
      }
    }
    in_run = bad;
  }
  return std::to_string(stale + torn + ahead) + " of " + std::to_string(lines) + " lines differ (" +
         std::to_string(stale) + " older, " + std::to_string(ahead) + " newer, " +
         std::to_string(torn) + " torn; " + std::to_string(runs) + " runs);" + examples;
}

// ---------------------------------------------------------------------------
// Writer

struct WriterOptions {
  std::string socket;
  std::string board;
  std::string name;  // default: dsm-bench/<pid>, unique per run
  std::string json_out;
  std::string dsmctl = DSM_BENCH_DEFAULT_DSMCTL;
  std::vector<std::string> peer_sockets;
  std::string raw_json;
  std::string tcp_json;  // bench/tcp-fanout's result for the same workload, same run
  std::string tcp_snapshots_json;  // the same with `reader --snapshots`, or empty
  std::vector<std::string> raw_mcast_json;
  // Copies of each version the writer's host sends: the readers when the
  // network has no multicast (memif links), else 1.
  uint32_t copies = 1;
  std::string label, device;
  uint32_t mtu = 0;
  double loss = 0;  // the daemons' --fault-drop, for the results
  bool keyed = false;  // the cluster authenticates frames (a key file), for the results
  uint32_t readers = 1;
  size_t size = size_t{64} << 20;
  double fraction = 0.01;
  uint64_t rounds = 2000;
  double seconds = 0;
  uint32_t warmup = 3;
  uint32_t window = 2;
  uint32_t gap_ms = 0;  // pause before each round (daemons go idle, as between training steps)
  uint64_t seed = 1;
  uint32_t sync_interval_us = 1000;
  uint32_t reader_buffers = 0;
  uint32_t timeout_s = 60;
  bool verify = true;
  bool timeline = false;
  bool no_counters = false;
  // Managed area (dsm_alloc_managed, ranked by absolute change): this many
  // MB/s per reader host; 0: a plain area.
  double managed_mbps = 0;
  uint32_t max_line_age = 8;
};

class Writer {
 public:
  explicit Writer(const WriterOptions& o) : o_(o) {}

  int Run();

 private:
  bool Setup(std::string* error);
  bool PublishWhole(std::string* error);
  // Waits until every reader sees at least `version`.
  bool WaitReaders(uint64_t version, std::string* error);
  bool Round(uint64_t version, std::string* error);
  bool Publish(uint64_t version, std::string* error);
  // Managed: after the last change, until the writer's host has sent every
  // line (dsm_service publishes versions that carry what waits).
  bool Converge(std::string* error);
  json Results();
  // Where each measured version's time went (stage_breakdown.h), from every
  // host's dsmd timeline; the replicas must still exist (readers attached).
  json Stages();
  json Targets(const json& r) const;
  void Fail(const std::string& error);
  void WriteExpected() const;
  void Emit(const json& j) const;
  json ConfigJson() const;

  WriterOptions o_;
  Board board_;
  BoardHeader* h_ = nullptr;
  uint8_t* area_ = nullptr;
  size_t lines_ = 0;
  std::unique_ptr<LineChooser> chooser_;
  std::vector<uint32_t> chosen_;
  uint64_t first_measured_ = 0, last_measured_ = 0;
  uint64_t final_version_ = 0;  // readers compare their copy at this version
  uint64_t busy_retries_ = 0;
  // Managed: the oldest lag the writer's host reported after any publish,
  // and how long the replicas took to hold every line after the last change.
  uint64_t max_oldest_lag_ = 0;
  double converge_ms_ = -1;
  std::vector<uint64_t> changed_lines_;  // by version
  std::vector<uint64_t> modify_ns_, publish_call_ns_, wait_ns_;
  std::vector<uint64_t> publish_end_ns_;  // by version: when dsm_publish returned
  json stages_ = nullptr;  // StageBreakdown of the measured versions
  json before_ = json::object(), after_ = json::object();
  // Every process of both sides over the measured rounds: (label, pid, CPU ms at the start).
  struct CpuMark {
    std::string label;
    int pid;
    double start_ms;
  };
  std::vector<CpuMark> cpu_marks_;
  json cpu_per_round_ = json::object();
  std::vector<std::string> counter_errors_;
  bool session_ = false;
};

json Writer::ConfigJson() const {
  return {{"label", o_.label},
          {"device", o_.device},
          {"mtu", o_.mtu},
          {"loss", o_.loss},
          {"keyed", o_.keyed},
          {"readers", o_.readers},
          {"area_bytes", o_.size},
          {"fraction", o_.fraction},
          {"lines_changed_per_round", chooser_ ? chooser_->per_round() : 0},
          {"changed_bytes_per_round", chooser_ ? chooser_->per_round() * kLine : 0},
          {"rounds_max", o_.rounds},
          {"seconds_max", o_.seconds},
          {"warmup_rounds", o_.warmup},
          {"window", o_.window},
          {"gap_ms", o_.gap_ms},
          {"seed", o_.seed},
          {"sync_interval_us", o_.sync_interval_us},
          {"reader_buffers", o_.reader_buffers == 0 ? 2 : o_.reader_buffers},
          {"managed_mbps", o_.managed_mbps},
          {"max_line_age", o_.max_line_age},
          {"area_name", o_.name}};
}

void Writer::Emit(const json& j) const {
  if (o_.json_out.empty()) return;
  const std::string tmp = o_.json_out + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
  }
  std::rename(tmp.c_str(), o_.json_out.c_str());
}

void Writer::Fail(const std::string& error) {
  std::fprintf(stderr, "dsm-bench writer: %s\n", error.c_str());
  if (h_ != nullptr) {
    SetMessage(h_->writer_error, error);
    h_->writer_state.store(static_cast<uint32_t>(WriterState::kFailed), std::memory_order_release);
  }
  json j = {{"tool", "dsm-bench"}, {"status", "failed"}, {"error", error}, {"config", ConfigJson()}};
  if (h_ != nullptr) {
    json rs = json::array();
    for (uint32_t r = 0; r < h_->readers; ++r) {
      const ReaderSlot& s = h_->reader[r];
      rs.push_back({{"id", r},
                    {"state", s.state.load()},
                    {"seen", s.seen.load()},
                    {"error", std::string(s.error)}});
    }
    j["readers"] = rs;
  }
  Emit(j);
}

// The version of every line at the final version, for readers to compare with.
void Writer::WriteExpected() const {
  std::vector<uint32_t> v(lines_);
  const auto* w = reinterpret_cast<const uint64_t*>(area_);
  for (size_t line = 0; line < lines_; ++line) v[line] = LineVersion(w + line * 8, line);
  const std::string path = o_.board + ".expect";
  std::ofstream out(path + ".tmp", std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  out.close();
  std::rename((path + ".tmp").c_str(), path.c_str());
}

bool Writer::Setup(std::string* error) {
  if (o_.size < 2 * kLine) {
    *error = "--size must be at least 128 bytes";
    return false;
  }
  lines_ = o_.size / kLine;
  if (o_.name.empty()) o_.name = "dsm-bench/" + std::to_string(getpid());
  chooser_ = std::make_unique<LineChooser>(lines_, o_.fraction, o_.seed);
  const uint64_t capacity = 2 + o_.warmup + o_.rounds;
  if (!board_.Create(o_.board, o_.readers, capacity, o_.size, o_.name, o_.verify, error)) {
    return false;
  }
  h_ = board_.header();
  h_->managed = o_.managed_mbps > 0;
  changed_lines_.assign(capacity, 0);
  if (!InitSession(o_.socket, error)) return false;
  session_ = true;
  dsm_alloc_opts ao{};
  ao.sync_interval_us = o_.sync_interval_us;
  ao.reader_buffers = o_.reader_buffers;
  void* p = nullptr;
  h_->alloc_ns.store(MonotonicNs(), std::memory_order_release);
  dsm_managed_opts mo{};
  mo.budget_bytes_per_s = static_cast<uint64_t>(o_.managed_mbps * 1e6);
  mo.max_line_age = o_.max_line_age;
  mo.element = DSM_ELEMENT_FLOAT32_ABSOLUTE;
  int rc = h_->managed ? dsm_alloc_managed(o_.name.c_str(), o_.size, &ao, &mo, &p)
                       : dsm_alloc(o_.name.c_str(), o_.size, &ao, &p);
  if (rc != DSM_OK) {
    *error = "dsm_alloc(" + o_.name + ", " + std::to_string(o_.size) + "): " + LastError(rc);
    return false;
  }
  area_ = static_cast<uint8_t*>(p);
  h_->writer_state.store(static_cast<uint32_t>(WriterState::kReady), std::memory_order_release);
  return true;
}

// Version 1 is the whole area. It is published only once every reader has
// attached (and so holds version 0). Publishing while a host subscribes races
// with dsmd enabling the area's export log: a publish that started before the
// export was enabled logs no lines for export, and if dsmd's first copy
// pinned the version before it, that version never reaches the new host
// (seen with dsmd as of 2026-11-21: the replica stays at version 0).
bool Writer::PublishWhole(std::string* error) {
  const uint64_t deadline = MonotonicNs() + uint64_t{o_.timeout_s} * 1000 * kMs;
  for (;;) {
    bool all = true;
    for (uint32_t r = 0; r < h_->readers; ++r) {
      const int32_t s = h_->reader[r].state.load(std::memory_order_acquire);
      if (s == static_cast<int32_t>(ReaderState::kFailed)) {
        *error = "reader " + std::to_string(r) + " failed: " + h_->reader[r].error;
        return false;
      }
      all &= s == static_cast<int32_t>(ReaderState::kReady);
    }
    if (all) break;
    if (g_interrupted || MonotonicNs() > deadline) {
      *error = g_interrupted ? "interrupted"
                             : "readers did not attach within " + std::to_string(o_.timeout_s) + " s";
      return false;
    }
    SleepNs(kMs);
  }
  auto* w = reinterpret_cast<uint64_t*>(area_);
  if (h_->managed) {
    for (size_t line = 0; line < lines_; ++line) {
      InitWeights(reinterpret_cast<float*>(w + line * 8), line);
    }
  } else {
    for (size_t line = 0; line < lines_; ++line) StampLine(w + line * 8, 1, line);
    w[0] = 1;
  }
  dsm_log(area_, lines_ * kLine);
  changed_lines_[1] = lines_;
  if (!Publish(1, error)) return false;
  return WaitReaders(1, error);
}

bool Writer::WaitReaders(uint64_t version, std::string* error) {
  const uint64_t start = MonotonicNs();
  uint64_t last_progress = start, last_min = 0;
  for (;;) {
    const uint32_t progress = h_->progress.load(std::memory_order_acquire);
    uint64_t min_seen = UINT64_MAX;
    for (uint32_t r = 0; r < h_->readers; ++r) {
      const ReaderSlot& s = h_->reader[r];
      if (s.state.load(std::memory_order_acquire) == static_cast<int32_t>(ReaderState::kFailed)) {
        *error = "reader " + std::to_string(r) + " failed: " + s.error;
        return false;
      }
      const uint64_t seen = s.state.load(std::memory_order_acquire) == 0
                                ? 0 : s.seen.load(std::memory_order_acquire);
      min_seen = std::min(min_seen, seen);
    }
    if (min_seen >= version) return true;
    const uint64_t now = MonotonicNs();
    if (min_seen != last_min) {
      last_min = min_seen;
      last_progress = now;
    }
    if (g_interrupted) {
      *error = "interrupted";
      return false;
    }
    if (now - last_progress > uint64_t{o_.timeout_s} * 1000 * kMs) {
      std::string seen;
      for (uint32_t r = 0; r < h_->readers; ++r) {
        seen += (r ? ", " : "") + std::to_string(h_->reader[r].seen.load()) + " (state " +
                std::to_string(h_->reader[r].state.load()) + ")";
      }
      *error = "readers did not reach version " + std::to_string(version) + " within " +
               std::to_string(o_.timeout_s) + " s without progress; they see " + seen;
      return false;
    }
    WaitProgress(h_, progress, kProgressWaitNs);
  }
}

bool Writer::Publish(uint64_t version, std::string* error) {
  const uint64_t t0 = MonotonicNs();
  board_.publish_ns()[version] = t0;
  int rc;
  while ((rc = dsm_publish(area_)) == DSM_ERR_BUSY) {
    ++busy_retries_;
    if (g_interrupted || MonotonicNs() - t0 > uint64_t{o_.timeout_s} * 1000 * kMs) {
      *error = "dsm_publish stayed busy: " + LastError(rc);
      return false;
    }
    SleepNs(kPollNs);
  }
  if (rc != DSM_OK) {
    *error = "dsm_publish: " + LastError(rc);
    return false;
  }
  if (dsm_version(area_) != version) {
    *error = "published version " + std::to_string(dsm_version(area_)) + ", expected " +
             std::to_string(version);
    return false;
  }
  const uint64_t t1 = MonotonicNs();
  publish_call_ns_.push_back(t1 - t0);
  if (publish_end_ns_.size() <= version) publish_end_ns_.resize(version + 1, 0);
  publish_end_ns_[version] = t1;
  return true;
}

bool Writer::Round(uint64_t version, std::string* error) {
  if (o_.gap_ms > 0) SleepNs(uint64_t{o_.gap_ms} * kMs);
  const uint64_t w0 = MonotonicNs();
  // The SSP-style bound: at most `window` versions ahead of the slowest reader.
  if (version > o_.window && !WaitReaders(version - o_.window, error)) return false;
  const uint64_t m0 = MonotonicNs();
  auto* w = reinterpret_cast<uint64_t*>(area_);
  size_t changed;
  if (h_->managed) {
    // Weights that move (the stamps below would rank as garbage floats).
    if (chooser_->all()) {
      for (size_t line = 0; line < lines_; ++line) {
        MoveWeights(reinterpret_cast<float*>(w + line * 8), version, line);
      }
      dsm_log(area_, lines_ * kLine);
      changed = lines_;
    } else {
      chooser_->Choose(&chosen_);
      for (uint32_t line : chosen_) {
        MoveWeights(reinterpret_cast<float*>(w + size_t{line} * 8), version, line);
        dsm_log(w + size_t{line} * 8, kLine);
      }
      changed = chosen_.size();
    }
  } else if (chooser_->all()) {
    for (size_t line = 0; line < lines_; ++line) StampLine(w + line * 8, version, line);
    w[0] = version;
    dsm_log(area_, lines_ * kLine);
    changed = lines_;
  } else {
    chooser_->Choose(&chosen_);
    for (uint32_t line : chosen_) {
      uint64_t* l = w + size_t{line} * 8;
      StampLine(l, version, line);
      dsm_log(l, kLine);
    }
    w[0] = version;
    w[1] = chosen_.size();
    changed = chosen_.size();
  }
  changed_lines_[version] = changed;
  const uint64_t m1 = MonotonicNs();
  if (!Publish(version, error)) return false;
  if (h_->managed) {
    dsm_managed_status st{};
    if (dsm_status_managed(area_, &st) == DSM_OK) {
      max_oldest_lag_ = std::max(max_oldest_lag_, st.oldest_lag);
    }
  }
  wait_ns_.push_back(m0 - w0);
  modify_ns_.push_back(m1 - m0);
  return true;
}

bool Writer::Converge(std::string* error) {
  const uint64_t t0 = MonotonicNs();
  for (;;) {
    dsm_service();
    const uint64_t v = dsm_version(area_);
    dsm_managed_status st{};
    const int rc = dsm_status_managed(area_, &st);
    if (rc != DSM_OK) {
      *error = "dsm_status_managed: " + LastError(rc);
      return false;
    }
    if (st.exported && st.as_of_version == v && st.residual_lines == 0) {
      converge_ms_ = static_cast<double>(MonotonicNs() - t0) / 1e6;
      final_version_ = v;
      return true;
    }
    if (g_interrupted || MonotonicNs() - t0 > uint64_t{o_.timeout_s} * 1000 * kMs) {
      *error = std::to_string(st.residual_lines) + " lines still wait after " +
               std::to_string(o_.timeout_s) + " s (as of version " +
               std::to_string(st.as_of_version) + ", writer at " + std::to_string(v) + ")";
      return false;
    }
    SleepNs(kMs);
  }
}

int Writer::Run() {
  std::string error;
  if (!Setup(&error)) {
    Fail(error);
    if (session_) dsm_fini();
    return 1;
  }
  std::printf("dsm-bench writer: area '%s' of %zu bytes allocated; waiting for %u reader(s)\n",
              o_.name.c_str(), o_.size, o_.readers);
  std::fflush(stdout);
  // Readers attach, then receive the whole area (version 1).
  if (!PublishWhole(&error)) {
    Fail("waiting for readers to attach: " + error);
    dsm_fini();
    return 1;
  }
  uint64_t v = 2;
  for (uint32_t i = 0; i < o_.warmup; ++i, ++v) {
    if (!Round(v, &error)) {
      Fail("warm-up round " + std::to_string(v) + ": " + error);
      dsm_fini();
      return 1;
    }
  }
  if (!WaitReaders(v - 1, &error)) {
    Fail("after warm-up: " + error);
    dsm_fini();
    return 1;
  }
  modify_ns_.clear();
  publish_call_ns_.clear();
  wait_ns_.clear();
  const uint64_t busy_before = busy_retries_;
  // Counters before: dsmd refreshes the transport's counters every heartbeat
  // (50 ms), so let them settle first.
  std::vector<std::string> sockets{o_.socket};
  sockets.insert(sockets.end(), o_.peer_sockets.begin(), o_.peer_sockets.end());
  if (!o_.no_counters) {
    SleepNs(120 * kMs);
    for (const auto& s : sockets) {
      std::string e;
      before_[s] = Snapshot(o_.dsmctl, s, &e);
      if (!e.empty()) counter_errors_.push_back(e);
    }
  }
  first_measured_ = v;
  cpu_marks_.push_back({"writer", static_cast<int>(getpid()), 0});
  for (uint32_t r = 0; r < o_.readers; ++r) {
    cpu_marks_.push_back({"reader " + std::to_string(r), h_->reader[r].pid, 0});
  }
  for (const auto& [sock, snap] : before_.items()) {
    if (snap.is_object() && snap.contains("daemon_pid")) {
      cpu_marks_.push_back({"dsmd " + sock, snap["daemon_pid"].get<int>(), 0});
    }
  }
  for (CpuMark& m : cpu_marks_) m.start_ms = ProcessCpuMs(m.pid);
  const uint64_t start = MonotonicNs();
  const uint64_t capacity = h_->capacity;
  for (uint64_t n = 0; n < o_.rounds && v < capacity; ++n, ++v) {
    if (n > 0 && o_.seconds > 0 && static_cast<double>(MonotonicNs() - start) / 1e9 >= o_.seconds) {
      break;
    }
    if (!Round(v, &error)) {
      Fail("round " + std::to_string(v) + ": " + error);
      dsm_fini();
      return 1;
    }
  }
  last_measured_ = v - 1;
  if (!WaitReaders(last_measured_, &error)) {
    Fail("waiting for the last version: " + error);
    dsm_fini();
    return 1;
  }
  busy_retries_ -= busy_before;
  const double rounds_measured = static_cast<double>(last_measured_ - first_measured_ + 1);
  double cpu_total = 0;
  for (const CpuMark& m : cpu_marks_) {
    const double per_round = (ProcessCpuMs(m.pid) - m.start_ms) / rounds_measured;
    cpu_per_round_[m.label] = per_round;
    cpu_total += per_round;
  }
  cpu_per_round_["total"] = cpu_total;
  if (!o_.no_counters) {
    SleepNs(120 * kMs);
    for (const auto& s : sockets) {
      std::string e;
      after_[s] = Snapshot(o_.dsmctl, s, &e);
      if (!e.empty()) counter_errors_.push_back(e);
    }
    stages_ = Stages();
  }
  final_version_ = last_measured_;
  if (h_->managed && (!Converge(&error) || !WaitReaders(final_version_, &error))) {
    Fail("managed area, after the last change: " + error);
    dsm_fini();
    return 1;
  }
  // Done: readers check the final content and leave.
  h_->final_hash = o_.verify ? XXH3_64bits(area_, o_.size) : 0;
  if (o_.verify && !h_->managed) WriteExpected();
  h_->final_version.store(final_version_, std::memory_order_release);
  h_->writer_state.store(static_cast<uint32_t>(WriterState::kDone), std::memory_order_release);
  const uint64_t deadline = MonotonicNs() + uint64_t{o_.timeout_s} * 1000 * kMs;
  for (;;) {
    bool all = true;
    for (uint32_t r = 0; r < h_->readers; ++r) {
      const int32_t s = h_->reader[r].state.load(std::memory_order_acquire);
      all &= s == static_cast<int32_t>(ReaderState::kDone) ||
             s == static_cast<int32_t>(ReaderState::kFailed);
    }
    if (all || MonotonicNs() > deadline || g_interrupted) break;
    SleepNs(kMs);
  }
  json result = Results();
  Emit(result);
  // Human summary.
  const json& r = result["results"];
  std::printf("dsm-bench %s: f=%g R=%u S=%zu: %" PRIu64 " rounds, %.1f rounds/s, %.1f MB/s changed, "
              "%.1f MB/s delivered, latency p50 %.3f ms p99 %.3f ms, wire %.3f B per changed B\n",
              o_.label.c_str(), o_.fraction, o_.readers, o_.size, r["rounds"].get<uint64_t>(),
              r["rounds_per_sec"].get<double>(), r["changed_bytes_per_sec"].get<double>() / 1e6,
              r.value("delivered_bytes_per_sec", 0.0) / 1e6,
              r["latency_ms"]["p50"].get<double>(), r["latency_ms"]["p99"].get<double>(),
              result["wire"].value("bytes_per_changed_byte", 0.0));
  const int rc = dsm_fini();
  if (rc != DSM_OK) std::fprintf(stderr, "dsm-bench writer: dsm_fini: %s\n", LastError(rc).c_str());
  if (!result.value("content_ok", false)) {
    std::fprintf(stderr, "dsm-bench writer: %s\n", result.value("error", std::string()).c_str());
  }
  return result["status"] == "ok" && result.value("content_ok", false) ? 0 : 1;
}

json Writer::Stages() {
  const std::string area = "timeline --area '" + o_.name + "'";
  bench::StageInputs in;
  in.first_version = first_measured_;
  in.last_version = last_measured_;
  in.publish_begin = [&](uint64_t v) { return board_.publish_ns()[v]; };
  in.publish_end = [&](uint64_t v) { return v < publish_end_ns_.size() ? publish_end_ns_[v] : 0; };
  in.seen = [&](uint32_t r, uint64_t v) { return board_.visible_ns(r)[v]; };
  std::string e;
  in.writer_host = Dsmctl(o_.dsmctl, o_.socket, area, &e);
  for (uint32_t r = 0; r < o_.readers && r < o_.peer_sockets.size() && e.empty(); ++r) {
    in.reader_host.push_back(Dsmctl(o_.dsmctl, o_.peer_sockets[r], area, &e));
  }
  if (!e.empty()) {
    counter_errors_.push_back(e);
    return nullptr;
  }
  return bench::StageBreakdown(in);
}

json Writer::Results() {
  const uint64_t rounds = last_measured_ + 1 - first_measured_;
  uint64_t end = 0;
  std::vector<double> all_ms;
  json per_reader = json::array();
  json readers = json::array();
  bool readers_done = true, content_ok = true;
  for (uint32_t r = 0; r < h_->readers; ++r) {
    const uint64_t* vis = board_.visible_ns(r);
    std::vector<double> ms;
    for (uint64_t v = first_measured_; v <= last_measured_; ++v) {
      const double lat = vis[v] >= board_.publish_ns()[v]
                             ? static_cast<double>(vis[v] - board_.publish_ns()[v]) / 1e6 : 0.0;
      ms.push_back(lat);
      all_ms.push_back(lat);
    }
    end = std::max(end, vis[last_measured_]);
    per_reader.push_back(LatencySummary(ms));
    const ReaderSlot& s = h_->reader[r];
    const bool done = s.state.load() == static_cast<int32_t>(ReaderState::kDone);
    const bool hash_ok = !o_.verify || (done && s.final_hash == h_->final_hash);
    readers_done &= done;
    content_ok &= hash_ok && s.stamp_errors == 0;
    readers.push_back({{"id", r},
                       {"pid", s.pid},
                       {"done", done},
                       {"error", std::string(s.error)},
                       {"distinct_versions", s.distinct_versions},
                       {"stamp_errors", s.stamp_errors},
                       {"final_version", s.final_version},
                       {"content_matches_writer", o_.verify ? json(hash_ok) : json(nullptr)},
                       {"attach_ms", static_cast<double>(s.attach_ns) / 1e6},
                       {"first_version_ms", static_cast<double>(s.first_version_ns) / 1e6},
                       {"whole_area_version_ms",
                        static_cast<double>(board_.visible_ns(r)[1] - board_.publish_ns()[1]) / 1e6},
                       {"wait_timeouts", s.wait_timeouts}});
  }
  const uint64_t start = board_.publish_ns()[first_measured_];
  const double elapsed = static_cast<double>(end - start) / 1e9;
  uint64_t changed_lines = 0;
  for (uint64_t v = first_measured_; v <= last_measured_; ++v) changed_lines += changed_lines_[v];
  const double changed_bytes = static_cast<double>(changed_lines * kLine);
  json res = {{"rounds", rounds},
              {"first_version", first_measured_},
              {"last_version", last_measured_},
              {"elapsed_s", elapsed},
              {"rounds_per_sec", static_cast<double>(rounds) / elapsed},
              {"changed_bytes", changed_lines * kLine},
              {"changed_bytes_per_sec", changed_bytes / elapsed},
              {"changed_bytes_per_sec_all_readers", changed_bytes * h_->readers / elapsed},
              {"latency_ms", LatencySummary(all_ms)},
              {"latency_ms_per_reader", per_reader},
              {"writer_ms_per_round",
               {{"window_wait", Mean(wait_ns_)},
                {"modify_and_log", Mean(modify_ns_)},
                {"publish_call", Mean(publish_call_ns_)}}},
              {"publish_busy_retries", busy_retries_},
              {"stages", stages_},
              {"readers", readers}};
  if (h_->managed) {
    res["managed"] = {{"budget_bytes_per_s", o_.managed_mbps * 1e6},
                      {"max_line_age", o_.max_line_age},
                      {"max_oldest_lag", max_oldest_lag_},
                      {"converge_ms", converge_ms_},
                      {"final_version", final_version_}};
  }
  if (o_.timeline) {
    json t = json::array();
    for (uint64_t v = first_measured_; v <= last_measured_; ++v) {
      json vis = json::array();
      for (uint32_t r = 0; r < h_->readers; ++r) {
        vis.push_back(static_cast<double>(board_.visible_ns(r)[v] - start) / 1e6);
      }
      t.push_back({{"version", v},
                   {"publish_ms", static_cast<double>(board_.publish_ns()[v] - start) / 1e6},
                   {"visible_ms", vis}});
    }
    res["timeline"] = t;
  }

  // Wire: the writer host's daemon, then every host's.
  json wire = json::object();
  json deltas = json::object();
  for (const auto& [sock, after] : after_.items()) {
    deltas[sock] = CounterDelta(before_.value(sock, json(nullptr)), after);
  }
  wire["counters_delta"] = deltas;
  if (!counter_errors_.empty()) wire["errors"] = counter_errors_;
  if (deltas.contains(o_.socket) && changed_bytes > 0) {
    const json& d = deltas[o_.socket];
    const auto get = [&](const char* k) { return static_cast<double>(d.value(k, uint64_t{0})); };
    wire["tx_bytes"] = d.value("tx_bytes", uint64_t{0});
    wire["tx_frames"] = d.value("tx_frames", uint64_t{0});
    wire["bytes_per_changed_byte"] = get("tx_bytes") / changed_bytes;
    // The protocol's overhead per copy (headers, run lists, resends), apart
    // from unicast fan-out's one copy per reader.
    wire["copies"] = o_.copies;
    wire["bytes_per_changed_byte_per_copy"] = get("tx_bytes") / changed_bytes / o_.copies;
    wire["frames_per_changed_byte"] = get("tx_frames") / changed_bytes;
    wire["frames_per_changed_mb"] = get("tx_frames") / changed_bytes * 1e6;
    wire["data_bytes_per_changed_byte"] = get("data_bytes_out") / changed_bytes;
    wire["data_frames_per_changed_mb"] = get("data_frames_out") / changed_bytes * 1e6;
    wire["changed_bytes_out_per_changed_byte"] = get("changed_bytes_out") / changed_bytes;
    double all_tx = 0;
    for (const auto& [sock, dd] : deltas.items()) {
      all_tx += static_cast<double>(dd.value("tx_bytes", uint64_t{0}));
    }
    wire["all_hosts_tx_bytes_per_changed_byte"] = all_tx / changed_bytes;
    wire["writer_area_after"] = AreaInfo(after_.value(o_.socket, json(nullptr)), o_.name);
  }

  json raw = json::object();
  double raw_bps = 0;
  if (!o_.raw_json.empty()) {
    raw["unicast"] = ReadRaw(o_.raw_json);
    if (!raw["unicast"].is_null()) {
      raw_bps = raw["unicast"]["gbit_per_sec"].get<double>() * 1e9 / 8;
      raw["bytes_per_sec"] = raw_bps;
    }
  }
  double mcast_bps = 0;
  if (!o_.raw_mcast_json.empty()) {
    json m = json::array();
    for (const auto& f : o_.raw_mcast_json) {
      json j = ReadRaw(f);
      m.push_back(j);
      const double bps = j.is_null() ? 0 : j["gbit_per_sec"].get<double>() * 1e9 / 8;
      mcast_bps = m.size() == 1 ? bps : std::min(mcast_bps, bps);
    }
    raw["multicast_receivers"] = m;
    raw["multicast_bytes_per_sec_min"] = mcast_bps;
  }

  // Delivered: the changed lines dsmd put on the wire (content only, no headers,
  // no retransmissions), once per transfer. Versions the writer published
  // faster than they could be shipped are coalesced (a line changed in two of
  // them travels once), so this is the replication throughput; the writer's
  // changed bytes/s can be higher.
  double delivered_bps = 0;
  if (wire.contains("changed_bytes_out_per_changed_byte")) {
    const double delivered = wire["changed_bytes_out_per_changed_byte"].get<double>() * changed_bytes;
    delivered_bps = delivered / elapsed;
    res["delivered_bytes"] = delivered;
    res["delivered_bytes_per_sec"] = delivered_bps;
    res["transfers_sent"] = deltas[o_.socket].value("transfers_sent", uint64_t{0});
  }
  json out = {
      {"tool", "dsm-bench"},
      {"status", readers_done ? "ok" : "failed"},
      {"content_ok", content_ok},
      {"config", ConfigJson()},
      {"results", res},
      {"wire", wire},
      {"raw", raw},
      {"tcp_fanout", ReadTcp(o_.tcp_json)},
      {"tcp_fanout_snapshots", ReadTcp(o_.tcp_snapshots_json)},
      {"environment", {{"cpus", sysconf(_SC_NPROCESSORS_ONLN)}, {"loadavg_1min", LoadAverage()}}}};
  if (!readers_done) {
    out["error"] = "a reader did not finish (see results.readers)";
  } else if (!content_ok) {
    out["error"] =
        "replica content differs from the writer's: a reader saw a version whose stamp line "
        "did not carry that version, or ended with other bytes than the writer (see results.readers)";
  }
  // The ratio to the raw throughput: delivered changed bytes per second over
  // the raw Ethernet bytes per second of the same device and namespaces.
  out["cpu_ms_per_round"] = cpu_per_round_;
  out["ratio"] = raw_bps > 0 && delivered_bps > 0 ? json(delivered_bps / raw_bps) : json(nullptr);
  out["ratio_vs_multicast_raw"] =
      mcast_bps > 0 && delivered_bps > 0 ? json(delivered_bps / mcast_bps) : json(nullptr);
  out["ratio_writer_changed_bytes"] =
      raw_bps > 0 ? json(res["changed_bytes_per_sec"].get<double>() / raw_bps) : json(nullptr);
  out["targets"] = Targets(out);
  return out;
}

// The targets replication is held to:
//  - f = 100%: changed bytes/s >= 70% of the raw throughput of the device;
//  - f = 1%: wire bytes (writer host's tx) <= 1.3 per changed byte;
//  - p99 publish-to-visible <= sync interval + 2 x transfer time, where the
//    transfer time is one round's changed bytes at the raw throughput.
json Writer::Targets(const json& out) const {
  json t = json::object();
  // A managed area trades delivery for bytes by design: the throughput and
  // latency targets of whole versions do not apply (PrintManagedTable).
  if (h_->managed) return t;
  const double raw_bps = out["raw"].value("bytes_per_sec", 0.0);
  const json& r = out["results"];
  if (o_.fraction >= 0.999) {
    // With R > 1 readers on a multicast network the like-for-like raw rate is
    // one sender's to all R receivers (the same frames reach every one).
    const json mc = out.value("ratio_vs_multicast_raw", json(nullptr));
    const bool vs_mc = o_.readers > 1 && !mc.is_null();
    const json ratio = vs_mc ? mc : out["ratio"];
    t["throughput_ratio"] = {{"limit", ">= 0.70"},
                             {"reference", vs_mc ? "multicast raw rate to all readers" : "unicast raw rate"},
                             {"value", ratio},
                             {"met", ratio.is_null() ? json(nullptr) : json(ratio.get<double>() >= 0.70)}};
  }
  if (std::fabs(o_.fraction - 0.01) < 1e-9) {
    const json v = out["wire"].value("bytes_per_changed_byte_per_copy", json(nullptr));
    t["wire_bytes_per_changed_byte"] = {{"limit", "<= 1.3"},
                                        {"value", v},
                                        {"met", v.is_null() ? json(nullptr) : json(v.get<double>() <= 1.3)}};
  }
  if (raw_bps > 0) {
    const double transfer_ms =
        static_cast<double>(chooser_->per_round() * kLine) / raw_bps * 1e3;
    const double bound = o_.sync_interval_us / 1e3 + 2 * transfer_ms;
    const double p99 = r["latency_ms"]["p99"].get<double>();
    t["latency_p99_ms"] = {{"limit", bound},
                           {"transfer_ms", transfer_ms},
                           {"value", p99},
                           {"met", p99 <= bound}};
  }
  return t;
}

// ---------------------------------------------------------------------------
// Reader

struct ReaderOptions {
  std::string socket;
  std::string board;
  uint32_t id = 0;
  uint32_t timeout_s = 60;
};

int RunReader(const ReaderOptions& o) {
  Board board;
  std::string error;
  if (!board.Open(o.board, o.timeout_s * 1000, &error)) {
    std::fprintf(stderr, "dsm-bench reader %u: %s\n", o.id, error.c_str());
    return 1;
  }
  BoardHeader* h = board.header();
  if (o.id >= h->readers) {
    std::fprintf(stderr, "dsm-bench reader: --id %u but the writer expects %u reader(s)\n", o.id,
                 h->readers);
    return 1;
  }
  ReaderSlot& slot = h->reader[o.id];
  slot.pid = getpid();
  bool session = false;
  const auto fail = [&](const std::string& e) {
    std::fprintf(stderr, "dsm-bench reader %u: %s\n", o.id, e.c_str());
    SetMessage(slot.error, e);
    slot.state.store(static_cast<int32_t>(ReaderState::kFailed), std::memory_order_release);
    if (session) dsm_fini();
    return 1;
  };
  const uint64_t t0 = MonotonicNs();
  if (!InitSession(o.socket, &error)) return fail(error);
  session = true;
  const void* p = nullptr;
  size_t size = 0;
  const uint64_t attach_start = MonotonicNs();
  int rc = dsm_attach(h->area_name, o.timeout_s * 1000, &p, &size);
  if (rc != DSM_OK) return fail(std::string("dsm_attach(") + h->area_name + "): " + LastError(rc));
  slot.first_version_ns =
      MonotonicNs() - std::max(attach_start, h->alloc_ns.load(std::memory_order_acquire));
  if (size < h->area_bytes) {
    return fail("the area has " + std::to_string(size) + " bytes, the writer said " +
                std::to_string(h->area_bytes));
  }
  slot.attach_ns = MonotonicNs() - t0;
  const auto* words = static_cast<const uint64_t*>(p);
  uint64_t* vis = board.visible_ns(o.id);
  const uint64_t capacity = h->capacity;
  uint64_t last = dsm_version(p);
  const bool stamped = h->managed == 0;  // a managed area's line 0 may lag
  if (stamped && words[0] != last) ++slot.stamp_errors;
  vis[std::min(last, capacity - 1)] = MonotonicNs();
  slot.seen.store(last, std::memory_order_release);
  slot.state.store(static_cast<int32_t>(ReaderState::kReady), std::memory_order_release);
  NotifyProgress(h);
  uint64_t last_progress = MonotonicNs();
  for (;;) {
    if (g_interrupted) return fail("interrupted");
    const auto ws = static_cast<WriterState>(h->writer_state.load(std::memory_order_acquire));
    if (ws == WriterState::kFailed) return fail(std::string("the writer failed: ") + h->writer_error);
    if (ws == WriterState::kDone && last >= h->final_version.load(std::memory_order_acquire)) break;
    rc = dsm_wait_version(p, last + 1, 50);
    const uint64_t now = MonotonicNs();
    const uint64_t v = dsm_version(p);
    if (v > last) {
      for (uint64_t u = last + 1; u <= v && u < capacity; ++u) vis[u] = now;
      if (stamped && words[0] != v) ++slot.stamp_errors;
      ++slot.distinct_versions;
      last = v;
      last_progress = now;
      slot.seen.store(v, std::memory_order_release);
      NotifyProgress(h);
    } else if (rc == DSM_ERR_TIMEOUT) {
      ++slot.wait_timeouts;
      if (ws != WriterState::kDone && now - last_progress > uint64_t{o.timeout_s} * 1000 * kMs) {
        return fail("no new version for " + std::to_string(o.timeout_s) + " s (at version " +
                    std::to_string(last) + ")");
      }
    } else if (rc != DSM_OK) {
      return fail("dsm_wait_version(" + std::to_string(last + 1) + "): " + LastError(rc));
    }
  }
  slot.final_version = last;
  slot.final_hash = h->verify ? XXH3_64bits(p, h->area_bytes) : 0;
  if (h->verify && slot.final_hash != h->final_hash) {
    const std::string why = stamped ? DiffLines(o.board + ".expect", words, h->area_bytes / kLine)
                                    : "a managed area: lines carry no version stamps";
    std::fprintf(stderr, "dsm-bench reader %u: content at version %" PRIu64
                 " differs from the writer's (XXH3 %016" PRIx64 " vs %016" PRIx64 "): %s\n",
                 o.id, last, slot.final_hash, h->final_hash, why.c_str());
    SetMessage(slot.error, "content differs from the writer's: " + why);
  }
  slot.state.store(static_cast<int32_t>(ReaderState::kDone), std::memory_order_release);
  std::printf("dsm-bench reader %u: %" PRIu64 " versions seen, final version %" PRIu64
              ", %" PRIu64 " stamp errors\n",
              o.id, slot.distinct_versions, last, slot.stamp_errors);
  rc = dsm_fini();
  return rc == DSM_OK ? 0 : 1;
}

// ---------------------------------------------------------------------------
// Report: one table over several runs, and one JSON file with all of them.

std::string Fmt(const json& v, const char* fmt) {
  if (v.is_null() || !v.is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v.get<double>());
  return buf;
}

std::string TargetCell(const json& t) {
  std::string s;
  for (const auto& [name, x] : t.items()) {
    const char* tag = name == "throughput_ratio" ? "thr"
                      : name == "wire_bytes_per_changed_byte" ? "wire"
                                                               : "p99";
    const std::string verdict = x["met"].is_null() ? "n/a" : x["met"].get<bool>() ? "ok" : "MISS";
    s += std::string(s.empty() ? "" : " ") + tag + ":" + verdict;
  }
  return s.empty() ? "-" : s;
}

// Runs of one configuration and fraction at several injected loss rates:
// time to the first version (dsm_attach of the whole area from the writer's
// dsm_alloc, the slowest reader) and goodput
// (the writer's changed bytes per second), each as a ratio to the same
// configuration's loss-free run of this invocation.
void PrintLossTable(const json& runs) {
  struct Point {
    double loss, first_ms, goodput;
  };
  std::map<std::pair<std::string, double>, std::vector<Point>> groups;
  bool any_loss = false;
  for (const auto& r : runs) {
    if (r.value("status", "") != "ok") continue;
    const json c = r.value("config", json::object());
    const double loss = c.value("loss", 0.0);
    any_loss |= loss > 0;
    double first_ms = 0;
    for (const auto& rd : r["results"]["readers"]) {
      first_ms = std::max(first_ms, rd.value("first_version_ms", 0.0));
    }
    std::string base = c.value("label", std::string("?"));
    if (const size_t at = base.find(" loss"); at != std::string::npos) base.resize(at);
    groups[{base, c.value("fraction", 0.0)}].push_back(
        {loss, first_ms, r["results"].value("changed_bytes_per_sec", 0.0)});
  }
  if (!any_loss) return;
  std::printf("\nunder injected loss (every dsmd drops this share of the frames it sends):\n");
  std::printf("%-30s %5s %6s %14s %8s %14s %8s\n", "config", "f", "loss", "1st version ms",
              "x 0%", "goodput MB/s", "x 0%");
  for (const auto& [key, points] : groups) {
    const auto clean = std::find_if(points.begin(), points.end(),
                                    [](const Point& p) { return p.loss == 0; });
    for (const Point& p : points) {
      char f[16], loss[16], r1[16] = "-", r2[16] = "-";
      std::snprintf(f, sizeof(f), "%g%%", key.second * 100);
      std::snprintf(loss, sizeof(loss), "%g%%", p.loss * 100);
      if (clean != points.end() && clean->first_ms > 0) {
        std::snprintf(r1, sizeof(r1), "%.2f", p.first_ms / clean->first_ms);
      }
      if (clean != points.end() && clean->goodput > 0) {
        std::snprintf(r2, sizeof(r2), "%.2f", p.goodput / clean->goodput);
      }
      std::printf("%-30s %5s %6s %14.1f %8s %14.1f %8s\n", key.first.c_str(), f, loss,
                  p.first_ms, r1, p.goodput / 1e6, r2);
    }
  }
}

// Each run against the TCP fan-out of the same workload measured in the same
// invocation (tcp-fanout: one TCP connection per reader, each changed line
// with its index): rounds/s and latency as ratios, CPU per round. `key` is
// the run's field holding that result, `title` what the table compares with.
void PrintTcpTable(const json& runs, const std::string& key, const char* title) {
  bool any = false;
  for (const auto& r : runs)
    any |= r.value("status", "") == "ok" && !r.value(key, json()).is_null();
  if (!any) return;
  std::printf("\nagainst %s:\n", title);
  std::printf("%-30s %5s %9s %9s %7s %9s %9s %7s %9s %9s\n", "config", "f", "r/s", "tcp r/s", "x tcp",
              "p50 ms", "tcp p50", "x tcp", "cpu ms/r", "tcp cpu");
  for (const auto& r : runs) {
    if (r.value("status", "") != "ok") continue;
    const json t = r.value(key, json());
    if (t.is_null() || t.value("status", "") != "ok") continue;
    const json c = r.value("config", json::object());
    const json& res = r["results"];
    const json& tr = t["results"];
    const double rps = res.value("rounds_per_sec", 0.0), trps = tr.value("rounds_per_sec", 0.0);
    const double p50 = res["latency_ms"].value("p50", 0.0), tp50 = tr["latency_ms"].value("p50", 0.0);
    double tcp_cpu = tr.value("writer_cpu_ms_per_round", 0.0);
    for (const auto& x : tr["reader_cpu_ms_per_round"]) tcp_cpu += x.get<double>();
    char f[16];
    std::snprintf(f, sizeof(f), "%g%%", c.value("fraction", 0.0) * 100);
    const double cpu = r.value("cpu_ms_per_round", json::object()).value("total", 0.0);
    std::printf("%-30s %5s %9.1f %9.1f %7.2f %9.2f %9.2f %7.2f %9.3f %9.3f\n",
                c.value("label", std::string("?")).c_str(), f, rps, trps, trps > 0 ? rps / trps : 0.0, p50,
                tp50, p50 > 0 ? tp50 / p50 : 0.0, cpu, tcp_cpu);
  }
  std::printf("x tcp: libdsm's rounds/s over TCP's, and TCP's p50 over libdsm's (above 1: libdsm is "
              "faster); cpu ms/r: CPU ms per round of the writer, the readers and every dsmd; tcp cpu: "
              "of TCP's writer and readers\n");
}

// Where the time from dsm_publish to the last remote reader went, per run:
// each stage's median in ms and its median share of the version's total.
void PrintStageTable(const json& runs) {
  bool any = false;
  for (const auto& r : runs) {
    any |= r.value("status", "") == "ok" && r["results"].value("stages", json()).is_object();
  }
  if (!any) return;
  std::printf("\nper-version timeline, publish to the last reader (median ms, median share):\n");
  std::printf("%-30s %5s %6s %8s", "config", "f", "vers", "total");
  const char* heads[] = {"publish", "wake", "collect", "plan", "frame", "transmit", "receive",
                         "rpublish", "reader"};
  for (const char* h : heads) std::printf(" %13s", h);
  std::printf("\n");
  for (const auto& r : runs) {
    if (r.value("status", "") != "ok") continue;
    const json st = r["results"].value("stages", json());
    if (!st.is_object()) continue;
    const json c = r.value("config", json::object());
    char f[16];
    std::snprintf(f, sizeof(f), "%g%%", c.value("fraction", 0.0) * 100);
    std::printf("%-30s %5s %6lu %8.3f", c.value("label", std::string("?")).c_str(), f,
                static_cast<unsigned long>(st.value("versions", uint64_t{0})),
                st.value("total_ms_p50", 0.0));
    for (const auto& s : st["stages"]) {
      char cell[32];
      std::snprintf(cell, sizeof(cell), "%.3f %3.0f%%", s.value("p50_ms", 0.0),
                    100 * s.value("share_p50", 0.0));
      std::printf(" %13s", cell);
    }
    std::printf("\n");
  }
  std::printf("stages end where the next begins: wake = until dsmd starts collecting; "
              "frame = until the last frame for that reader's host is queued; transmit = until the device queue "
              "drained; receive = until the replica has every frame; rpublish = until its readers "
              "can read it; reader = until the reader process sees it\n");
}

// Runs of one configuration with and without a key file: rounds/s keyed as
// a share of rounds/s without (medians where a configuration ran repeatedly).
// Managed runs: what reached the wire per changed byte, the oldest lag the
// writer's host reported against the bound, and the time from the last
// change until every line had been sent (replicas then compared by XXH3).
void PrintManagedTable(const json& runs) {
  bool any = false;
  for (const auto& r : runs) {
    if (r.value("status", "") != "ok" || !r["results"].contains("managed")) continue;
    if (!any) {
      std::printf("\nmanaged areas (ranked by absolute change):\n");
      std::printf("%-30s %5s %10s %9s %10s %8s %11s  %s\n", "config", "f", "budget MB/s",
                  "wire/chg", "oldest lag", "bound", "converge ms", "replicas");
      any = true;
    }
    const json c = r.value("config", json::object());
    const json& m = r["results"]["managed"];
    const json& w = r["wire"];
    char f[16];
    std::snprintf(f, sizeof(f), "%g%%", c.value("fraction", 0.0) * 100);
    std::printf("%-30s %5s %10.1f %9s %10s %8s %11s  %s\n",
                c.value("label", std::string("?")).c_str(), f,
                m.value("budget_bytes_per_s", 0.0) / 1e6,
                Fmt(w.value("bytes_per_changed_byte_per_copy",
                            w.value("bytes_per_changed_byte", json(nullptr))),
                    "%.3f")
                    .c_str(),
                Fmt(m["max_oldest_lag"], "%.0f").c_str(), Fmt(m["max_line_age"], "%.0f").c_str(),
                Fmt(m["converge_ms"], "%.1f").c_str(),
                r.value("content_ok", true) ? "byte-identical (XXH3)" : "DIFFER");
  }
}

void PrintKeyTable(const json& runs) {
  std::map<std::pair<std::string, double>, std::pair<std::vector<double>, std::vector<double>>> groups;
  bool any_keyed = false;
  for (const auto& r : runs) {
    if (r.value("status", "") != "ok") continue;
    const json c = r.value("config", json::object());
    const bool keyed = c.value("keyed", false);
    any_keyed |= keyed;
    std::string base = c.value("label", std::string("?"));
    if (const size_t at = base.find(" key"); at != std::string::npos) base.resize(at);
    auto& g = groups[{base, c.value("fraction", 0.0)}];
    (keyed ? g.second : g.first).push_back(r["results"].value("rounds_per_sec", 0.0));
  }
  if (!any_keyed) return;
  const auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("\nframes authenticated (AES-256-GMAC, a key file) against the same runs without a key:\n");
  std::printf("%-30s %5s %5s %12s %12s %8s %8s\n", "config", "f", "runs", "no key r/s", "key r/s",
              "x nokey", "cost");
  for (const auto& [key, points] : groups) {
    const double plain = median(points.first), keyed = median(points.second);
    char f[16], ratio[16] = "-", cost[16] = "-";
    std::snprintf(f, sizeof(f), "%g%%", key.second * 100);
    if (plain > 0 && keyed > 0) {
      std::snprintf(ratio, sizeof(ratio), "%.3f", keyed / plain);
      std::snprintf(cost, sizeof(cost), "%.1f%%", (1 - keyed / plain) * 100);
    }
    std::printf("%-30s %5s %2zu/%-2zu %12.1f %12.1f %8s %8s\n", key.first.c_str(), f,
                points.first.size(), points.second.size(), plain, keyed, ratio, cost);
  }
}

int RunReport(const std::vector<std::string>& files, const std::string& out_path,
              const std::string& notes) {
  json runs = json::array();
  for (const auto& f : files) {
    std::ifstream in(f);
    if (!in) {
      runs.push_back({{"status", "failed"}, {"error", "no result file " + f}});
      continue;
    }
    try {
      runs.push_back(json::parse(in));
    } catch (const std::exception& e) {
      runs.push_back({{"status", "failed"}, {"error", f + ": " + e.what()}});
    }
  }
  std::printf("%-30s %5s %9s %9s %9s %9s %6s %6s %8s %7s %8s %8s %8s  %s\n", "config", "f",
              "rounds/s", "chg MB/s", "dlv MB/s", "raw MB/s", "ratio", "mc", "wireB/cB", "frm/MB",
              "p50 ms", "p99 ms", "bound ms", "targets");
  int met = 0, missed = 0, failed = 0, bad_content = 0;
  for (const auto& r : runs) {
    const json c = r.value("config", json::object());
    std::string label = c.value("label", std::string("?"));
    if (label.empty()) label = "?";
    char f[16];
    std::snprintf(f, sizeof(f), "%g%%", c.value("fraction", 0.0) * 100);
    if (r.value("status", "") != "ok") {
      ++failed;
      std::printf("%-30s %5s  FAILED: %s\n", label.c_str(), f,
                  r.value("error", std::string("unknown")).substr(0, 140).c_str());
      continue;
    }
    const json& res = r["results"];
    const json& w = r["wire"];
    const json& t = r["targets"];
    const bool content_ok = r.value("content_ok", true);
    if (!content_ok) ++bad_content;
    for (const auto& [n, x] : t.items()) {
      if (x["met"].is_boolean()) (x["met"].get<bool>() ? met : missed) += 1;
    }
    const json bound = t.contains("latency_p99_ms") ? t["latency_p99_ms"]["limit"] : json(nullptr);
    std::printf("%-30s %5s %9s %9s %9s %9s %6s %6s %8s %7s %8s %8s %8s  %s\n", label.c_str(), f,
                Fmt(res["rounds_per_sec"], "%.1f").c_str(),
                Fmt(res["changed_bytes_per_sec"].get<double>() / 1e6, "%.1f").c_str(),
                Fmt(res.contains("delivered_bytes_per_sec")
                        ? json(res["delivered_bytes_per_sec"].get<double>() / 1e6) : json(nullptr),
                    "%.1f").c_str(),
                Fmt(r["raw"].contains("bytes_per_sec") ? json(r["raw"]["bytes_per_sec"].get<double>() / 1e6)
                                                       : json(nullptr), "%.1f").c_str(),
                Fmt(r["ratio"], "%.2f").c_str(), Fmt(r.value("ratio_vs_multicast_raw", json(nullptr)), "%.2f").c_str(),
                Fmt(w.value("bytes_per_changed_byte_per_copy", w.value("bytes_per_changed_byte", json(nullptr))),
                    "%.3f").c_str(),
                Fmt(w.value("frames_per_changed_mb", json(nullptr)), "%.0f").c_str(),
                Fmt(res["latency_ms"]["p50"], "%.2f").c_str(),
                Fmt(res["latency_ms"]["p99"], "%.2f").c_str(), Fmt(bound, "%.2f").c_str(),
                (TargetCell(t) + (content_ok ? "" : " CONTENT-DIFFERS")).c_str());
  }
  PrintLossTable(runs);
  PrintKeyTable(runs);
  PrintManagedTable(runs);
  PrintTcpTable(runs, "tcp_fanout",
                "a TCP fan-out of the same changes (bench/tcp_fanout, same namespaces, same run)");
  PrintTcpTable(
      runs, "tcp_fanout_snapshots",
      "the same TCP fan-out whose readers keep versions atomic as libdsm's do (tcp-fanout "
      "reader --snapshots: two buffers, a view remapped per version)");
  PrintStageTable(runs);
  std::printf("targets: %d met, %d missed; %d run(s) failed; %d run(s) with replica content "
              "different from the writer's\n", met, missed, failed, bad_content);
  std::printf(
      "chg: the writer's changed bytes per second; dlv: changed lines dsmd put on the wire per "
      "second (coalesced versions travel once); raw: raw_throughput receiver, Ethernet bytes; "
      "ratio: dlv/raw (mc: over the multicast raw rate, R > 1, which the target then uses); wireB/cB and frm/MB: the writer "
      "host's tx bytes per changed byte (per copy where the network has no multicast and each "
      "reader gets its own: memif) and frames per changed MB; latency: publish call to "
      "visible in the reader process, all readers; bound: sync interval + 2 x one round's changed "
      "bytes at the raw rate\n");
  if (!notes.empty()) std::printf("%s\n", notes.c_str());
  if (!out_path.empty()) {
    json all = {{"tool", "dsm-bench"},
                {"runs", runs},
                {"targets_met", met},
                {"targets_missed", missed},
                {"runs_failed", failed},
                {"runs_content_differs", bad_content}};
    if (!notes.empty()) all["notes"] = notes;
    const std::string tmp = out_path + ".tmp";
    {
      std::ofstream out(tmp);
      if (!out) {
        std::fprintf(stderr, "dsm-bench report: cannot write %s\n", tmp.c_str());
        return 1;
      }
      out << all.dump(2) << "\n";
    }
    std::rename(tmp.c_str(), out_path.c_str());
    std::printf("wrote %s\n", out_path.c_str());
  }
  return failed || bad_content ? 1 : 0;
}

size_t ParseSize(const std::string& s) {
  size_t pos = 0;
  const double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  double mul = 1;
  if (unit == "k" || unit == "K" || unit == "KiB") mul = 1024;
  else if (unit == "m" || unit == "M" || unit == "MiB") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "G" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) throw std::invalid_argument("unknown size unit '" + unit + "'");
  return static_cast<size_t>(v * mul);
}

int Main(int argc, char** argv) {
  CLI::App app{"dsm-bench: end-to-end replication benchmark (writer on one host, readers on others)"};
  app.require_subcommand(1);

  WriterOptions w;
  std::string size_text = "64M";
  CLI::App* wr = app.add_subcommand("writer", "allocate the area and run the rounds");
  wr->add_option("--socket", w.socket, "this host's dsmd socket (default $DSM_SOCKET)");
  wr->add_option("--board", w.board, "coordination file on the shared filesystem")->required();
  wr->add_option("--readers", w.readers, "reader processes (one per host)")
      ->check(CLI::Range(1, kBoardMaxReaders));
  wr->add_option("--size", size_text, "area bytes (suffix K, M, G)")->capture_default_str();
  wr->add_option("--fraction", w.fraction, "fraction of lines changed per round")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  wr->add_option("--rounds", w.rounds, "measured rounds (at most)")->capture_default_str();
  wr->add_option("--seconds", w.seconds, "stop starting rounds after this long (0: no limit)");
  wr->add_option("--warmup", w.warmup, "unmeasured rounds first")->capture_default_str();
  wr->add_option("--window", w.window,
                 "a round starts when every reader sees the version this many rounds back "
                 "(1: lock step)")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  wr->add_option("--gap-ms", w.gap_ms, "pause before each round, ms (0: none)");
  wr->add_option("--seed", w.seed, "seed of the line choice")->capture_default_str();
  wr->add_option("--name", w.name, "area name (default dsm-bench/<pid>; readers learn it from the board)");
  wr->add_option("--sync-interval-us", w.sync_interval_us, "the area's sync interval")
      ->capture_default_str();
  wr->add_option("--reader-buffers", w.reader_buffers, "reader buffers per host (0: default)");
  wr->add_option("--timeout-s", w.timeout_s, "give up after this long without progress")
      ->capture_default_str();
  wr->add_option("--json", w.json_out, "write the results here");
  wr->add_option("--dsmctl", w.dsmctl, "dsmctl binary, for the daemons' counters")
      ->capture_default_str();
  wr->add_option("--peer-socket", w.peer_sockets, "reader hosts' dsmd sockets (counters)");
  wr->add_option("--raw-json", w.raw_json, "raw_throughput --json receiver output (unicast)");
  wr->add_option("--tcp-json", w.tcp_json, "tcp-fanout --json output of the same workload");
  wr->add_option(
      "--tcp-snapshots-json", w.tcp_snapshots_json,
      "the same with the readers keeping atomic versions (tcp-fanout reader --snapshots)");
  wr->add_option("--raw-mcast-json", w.raw_mcast_json, "raw_throughput receivers, multicast");
  wr->add_option("--copies", w.copies, "copies of each version the writer's host sends (unicast fan-out: the readers)")
      ->check(CLI::Range(1u, 64u));
  wr->add_option("--label", w.label, "configuration name in the results");
  wr->add_option("--device", w.device, "device name in the results");
  wr->add_option("--mtu", w.mtu, "MTU in the results");
  wr->add_option("--loss", w.loss, "the daemons' injected frame loss (--fault-drop), in the results")
      ->check(CLI::Range(0.0, 1.0));
  wr->add_flag("--keyed", w.keyed, "the cluster authenticates frames with a key, in the results");
  wr->add_flag("!--no-verify", w.verify, "skip the final XXH3 comparison of the replicas");
  wr->add_option("--managed-mbps", w.managed_mbps,
                 "a managed area (dsm_alloc_managed, absolute rank) sent within this many MB/s "
                 "per reader host (0: a plain area)")
      ->check(CLI::Range(0.0, 1e6));
  wr->add_option("--max-line-age", w.max_line_age, "managed: versions a line may lag")
      ->capture_default_str();
  wr->add_flag("--timeline", w.timeline, "per-version publish and visible times in the JSON");
  wr->add_flag("--no-counters", w.no_counters, "do not read dsmd counters");

  ReaderOptions r;
  CLI::App* rd = app.add_subcommand("reader", "attach the area on this host and follow it");
  rd->add_option("--socket", r.socket, "this host's dsmd socket (default $DSM_SOCKET)");
  rd->add_option("--board", r.board, "coordination file the writer creates")->required();
  rd->add_option("--id", r.id, "reader index, 0..readers-1")->required();
  rd->add_option("--timeout-s", r.timeout_s, "give up after this long without progress")
      ->capture_default_str();

  std::vector<std::string> files;
  std::string out_path, notes;
  CLI::App* rp = app.add_subcommand("report", "table over result files; combined JSON");
  rp->add_option("files", files, "writer --json outputs")->required();
  rp->add_option("--out", out_path, "combined JSON file");
  rp->add_option("--notes", notes, "free text printed under the table and stored in the JSON");

  CLI11_PARSE(app, argc, argv);
  InstallSignals();
  if (*wr) {
    try {
      w.size = ParseSize(size_text);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dsm-bench: --size %s: %s\n", size_text.c_str(), e.what());
      return 2;
    }
    Writer writer(w);
    return writer.Run();
  }
  if (*rd) return RunReader(r);
  return RunReport(files, out_path, notes);
}

}  // namespace
}  // namespace dsm::bench

int main(int argc, char** argv) { return dsm::bench::Main(argc, argv); }
