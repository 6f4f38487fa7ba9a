// ManagedSelection::Select (coherence/managed_selection.h) on the update a
// training step makes: every float of a 7.45 MB area (the Fashion-MNIST MLP)
// moves a little, and a quarter of its lines fit the budget. Reported next
// to references measured in the same iteration:
//   x_memcpy    select time / one memcpy of the whole area (what sending it
//               whole costs the sender at least: every byte read once);
//   x_frames    select time / a memcpy of the lines chosen into a buffer of
//               their own (what framing them costs).
// Pure logic: no daemon, no network.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/managed_selection.h"

namespace dsm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void BM_SelectDenseUpdate(benchmark::State& state) {
  constexpr size_t kFloats = 1'863'690;  // 784-1024-1024-10 with biases
  const size_t bytes = (kFloats * sizeof(float) + kLineBytes - 1) / kLineBytes * kLineBytes;
  const double share = static_cast<double>(state.range(0)) / 100.0;
  std::vector<float> area(bytes / sizeof(float));
  std::mt19937 rng(1);
  std::normal_distribution<float> init(0.0f, 0.05f), step(0.0f, 0.01f);
  for (float& x : area) x = init(rng);
  ManagedSelection selection(bytes, {.max_line_age = 8});
  selection.Reset(reinterpret_cast<const uint8_t*>(area.data()));
  LineSet all(bytes), send(bytes);
  all.AddAll();
  std::vector<uint8_t> copy(bytes), gathered(bytes);
  const size_t budget = static_cast<size_t>(share * static_cast<double>(bytes));
  double select_s = 0, memcpy_s = 0, frames_s = 0;
  uint64_t version = 1, lines = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < area.size(); i += 7) area[i] *= 1.0f + step(rng);  // every line
    Clock::time_point t0 = Clock::now();
    const ManagedChoice c =
        selection.Select(++version, all, reinterpret_cast<const uint8_t*>(area.data()), budget,
                         &send);
    const double t = SecondsSince(t0);
    state.SetIterationTime(t);
    select_s += t;
    lines += c.lines;
    t0 = Clock::now();
    std::memcpy(copy.data(), area.data(), bytes);
    benchmark::ClobberMemory();
    memcpy_s += SecondsSince(t0);
    t0 = Clock::now();
    uint8_t* out = gathered.data();
    send.ForEachRun([&](size_t first, size_t count) {
      std::memcpy(out, reinterpret_cast<const uint8_t*>(area.data()) + first * kLineBytes,
                  count * kLineBytes);
      out += count * kLineBytes;
    });
    benchmark::ClobberMemory();
    frames_s += SecondsSince(t0);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["lines_chosen"] = static_cast<double>(lines) / n;
  state.counters["area_MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["x_memcpy"] = select_s / memcpy_s;
  state.counters["x_frames"] = select_s / frames_s;
}
BENCHMARK(BM_SelectDenseUpdate)
    ->Arg(25)
    ->Arg(10)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(60);

}  // namespace
}  // namespace dsm::bench

BENCHMARK_MAIN();
