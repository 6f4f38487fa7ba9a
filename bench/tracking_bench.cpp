// The writer's cost of finding its own stores, for a 64 MiB area: a store-heavy
// interval (every 8-byte word of a fraction of its pages, pages picked at
// random, seeded, afresh each interval) followed by dsm_publish, in four modes,
// each on its own area, all four on the same pages within each iteration (so
// the ratios compare like with like, measured in the same run):
//   untracked  plain stores into an explicit-log area, never logged: what the
//              stores cost with no tracking at all (its publish has nothing to do);
//   log        the same stores, each followed by dsm_log (explicit logging);
//   uffd       page tracking by userfaultfd WP_ASYNC + PAGEMAP_SCAN, no dsm_log;
//   mprotect   page tracking by the mprotect + SIGSEGV fallback, no dsm_log.
// Counters: <mode>_stores_us and <mode>_publish_us per interval, and the ratios
//   <tracker>_x_ref    (stores + publish) / (untracked stores + log's publish):
//                      the page-tracking issue's target at 1% touched is <= 1.5;
//   <tracker>_x_log    (stores + publish) / log's (stores + publish): target
//                      at 100% touched is <= 2;
//   <tracker>_stores_x_untracked  the stores alone (write-protect faults).
// The benchmark's time is one iteration of all four modes.
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "dsm/dsm.h"

namespace dsm::bench {
namespace {

constexpr size_t kPages = kAreaBytes / kPageBytes;
constexpr size_t kWordsPerPage = kPageBytes / sizeof(uint64_t);

enum class Mode { kUntracked, kLog, kUffd, kMprotect };

struct ModeInfo {
  const char* name;
  uint32_t tracking;
  uint32_t tracker;
};
const std::map<Mode, ModeInfo> kModes = {
    {Mode::kUntracked, {"untracked", DSM_TRACK_LOG, DSM_PAGE_TRACKER_AUTO}},
    {Mode::kLog, {"log", DSM_TRACK_LOG, DSM_PAGE_TRACKER_AUTO}},
    {Mode::kUffd, {"uffd", DSM_TRACK_PAGES, DSM_PAGE_TRACKER_UFFD}},
    {Mode::kMprotect, {"mprotect", DSM_TRACK_PAGES, DSM_PAGE_TRACKER_MPROTECT}},
};

// One warm area per mode, made on first use (after dsm_init).
uint64_t* AreaFor(Mode mode) {
  static std::map<Mode, uint64_t*> areas;
  auto it = areas.find(mode);
  if (it != areas.end()) return it->second;
  const ModeInfo& info = kModes.at(mode);
  dsm_alloc_opts opts{};
  opts.tracking = info.tracking;
  opts.page_tracker = info.tracker;
  const std::string name = std::string("bench/tracking/") + info.name;
  auto* area = static_cast<uint64_t*>(AllocWarmArea(name.c_str(), kAreaBytes, &opts));
  areas[mode] = area;
  return area;
}

// The interval's stores: every word of each picked page.
template <bool kLogged>
void StorePages(uint64_t* area, const std::vector<uint32_t>& pages, uint64_t value) {
  for (uint32_t page : pages) {
    uint64_t* w = area + size_t{page} * kWordsPerPage;
    for (size_t i = 0; i < kWordsPerPage; ++i) {
      w[i] = value + i;
      if constexpr (kLogged) dsm_log(&w[i], sizeof(uint64_t));
    }
  }
  benchmark::ClobberMemory();
}

struct ModeTimes {
  double stores_s = 0;
  double publish_s = 0;
  double total() const { return stores_s + publish_s; }
};

// One interval of `mode` on `pages`; false (with the error in `state`) on failure.
bool Interval(benchmark::State& state, Mode mode, const std::vector<uint32_t>& pages,
              uint64_t value, ModeTimes* t) {
  uint64_t* area = AreaFor(mode);
  if (!area) {
    state.SkipWithError("cannot allocate the benchmark areas (see stderr)");
    return false;
  }
  Clock::time_point t0 = Clock::now();
  if (mode == Mode::kLog) {
    StorePages<true>(area, pages, value);
  } else {
    StorePages<false>(area, pages, value);
  }
  t->stores_s += SecondsSince(t0);
  t0 = Clock::now();
  if (const int rc = dsm_publish(area); rc != DSM_OK) {
    state.SkipWithError(dsm_last_error());
    return false;
  }
  t->publish_s += SecondsSince(t0);
  return true;
}

void RunFraction(benchmark::State& state, double fraction) {
  std::mt19937_64 rng(kSeed);
  const size_t touched = std::max<size_t>(1, static_cast<size_t>(fraction * kPages));
  std::map<Mode, ModeTimes> times;
  uint64_t value = 1000;
  for (auto _ : state) {
    const std::vector<uint32_t> pages = PickLines(rng, kPages, touched);
    value += 7;
    for (const auto& [mode, info] : kModes) {
      if (!Interval(state, mode, pages, value, &times[mode])) return;
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["pages"] = static_cast<double>(touched);
  for (const auto& [mode, info] : kModes) {
    const std::string name = info.name;
    state.counters[name + "_stores_us"] = times[mode].stores_s / n * 1e6;
    state.counters[name + "_publish_us"] = times[mode].publish_s / n * 1e6;
  }
  const ModeTimes& untracked = times[Mode::kUntracked];
  const ModeTimes& log = times[Mode::kLog];
  for (Mode tracker : {Mode::kUffd, Mode::kMprotect}) {
    const std::string name = kModes.at(tracker).name;
    const ModeTimes& t = times[tracker];
    state.counters[name + "_x_ref"] = t.total() / (untracked.stores_s + log.publish_s);
    state.counters[name + "_x_log"] = t.total() / log.total();
    state.counters[name + "_stores_x_untracked"] = t.stores_s / untracked.stores_s;
  }
}

void RegisterAll() {
  struct Fraction {
    const char* label;
    double fraction;
    int iterations;
  };
  static const Fraction fractions[] = {
      {"0.1%", 0.001, 400}, {"1%", 0.01, 200}, {"10%", 0.1, 40}, {"100%", 1.0, 10}};
  for (const Fraction& f : fractions) {
    const std::string name = std::string("tracking/touched:") + f.label;
    const double fr = f.fraction;
    benchmark::RegisterBenchmark(name.c_str(), [fr](benchmark::State& st) { RunFraction(st, fr); })
        ->Iterations(f.iterations)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace dsm::bench

int main(int argc, char** argv) {
  dsm::bench::RegisterAll();
  return dsm::bench::RunWithPrivateDaemon(argc, argv);
}
