// dsm_log() next to the same stores without logging, into a 64 MiB area:
//   log/1line/<pattern>  one float store (+ dsm_log of those 4 bytes: the
//                        inline fast path), 4096 stores per batch; patterns:
//                        seq   every line in address order (a dense update),
//                        rand  every line in a random order (a sparse update),
//                        hot   random lines of the first 1 MiB (cache-resident:
//                              the worst case for the relative overhead);
//   log/1KiB/rand        a 1 KiB block of floats at a random place (16 lines:
//                        dsm_log takes the multi-line path), 256 per batch;
//   log/1MiB/rand        a 1 MiB block, one per batch.
// The `plain` runs are the stores alone. The `logged` runs also time a batch
// of plain stores next to every logged batch (alternating which goes first,
// each on fresh positions) and report x_plain = logged / plain from that;
// their Time column is the logged batch, their CPU column includes both.
// ns_per_op is per store op (one float, or one whole block).
// Target (foundation issue): 1line x_plain <= 2.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "dsm/dsm.h"

namespace dsm::bench {
namespace {

enum class Pattern { kSequential, kRandom, kHot };

// The lines of the `hot` pattern: the first 1 MiB of the area.
constexpr size_t kHotLines = (size_t{1} << 20) / kLineBytes;
constexpr size_t kLineStoresPerBatch = 4096;
constexpr size_t kBlockBytesPerBatch = 256 * 1024;

// One store (or block of stores) is `Floats` floats at `area + first[i]`.
// Returns the OR of dsm_log's results (0 if all succeeded).
template <bool kLogged, size_t kFloats>
int StoreBatch(float* area, const uint32_t* first, size_t n, float value) {
  int rc = DSM_OK;
  for (size_t i = 0; i < n; ++i) {
    float* p = area + first[i];
    for (size_t j = 0; j < kFloats; ++j) p[j] = value;
    if constexpr (kLogged) rc |= dsm_log(p, kFloats * sizeof(float));
  }
  benchmark::ClobberMemory();
  return rc;
}

using BatchFn = int (*)(float* area, const uint32_t* first, size_t n, float value);

struct StoreKind {
  std::string name;
  size_t block_bytes;  // bytes written by one store op
  Pattern pattern;
  BatchFn plain;
  BatchFn logged;
};

// Where the store ops go: float index of each op, consumed in order, wrapping.
struct StoreStream {
  std::vector<uint32_t> first;
  size_t cursor = 0;
  size_t per_batch = 0;

  const uint32_t* Next() {
    if (cursor + per_batch > first.size()) cursor = 0;
    const uint32_t* p = first.data() + cursor;
    cursor += per_batch;
    return p;
  }
};

StoreStream MakeStream(const StoreKind& kind) {
  std::mt19937_64 rng(kSeed);
  StoreStream s;
  if (kind.block_bytes < kLineBytes) {
    // One float per line, at a varying place inside the line.
    const size_t lines = kind.pattern == Pattern::kHot ? kHotLines : kAreaLines;
    std::vector<uint32_t> order(lines);
    for (size_t i = 0; i < lines; ++i) order[i] = static_cast<uint32_t>(i);
    if (kind.pattern != Pattern::kSequential) std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t line : order) {
      s.first.push_back(static_cast<uint32_t>(line * kFloatsPerLine + line % kFloatsPerLine));
    }
    s.per_batch = kLineStoresPerBatch;
  } else {
    const size_t blocks = kAreaBytes / kind.block_bytes;
    std::vector<uint32_t> order(blocks);
    for (size_t i = 0; i < blocks; ++i) order[i] = static_cast<uint32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t b : order) {
      s.first.push_back(static_cast<uint32_t>(b * (kind.block_bytes / sizeof(float))));
    }
    s.per_batch = std::max<size_t>(1, kBlockBytesPerBatch / kind.block_bytes);
  }
  return s;
}

// The writer copy every store goes to, allocated on first use (after dsm_init).
float* LogArea() {
  static void* const area = AllocWarmArea("bench/log", kAreaBytes);
  return static_cast<float*>(area);
}

void RunStores(benchmark::State& state, const StoreKind& kind, StoreStream& stream, bool logged) {
  float* area = LogArea();
  if (!area) {
    state.SkipWithError("cannot allocate the benchmark area (see stderr)");
    return;
  }
  const size_t n = stream.per_batch;
  double plain_s = 0;
  double logged_s = 0;
  uint64_t batches = 0;
  float value = 0;
  int rc = DSM_OK;
  auto time_batch = [&](BatchFn fn, double* total) {
    const Clock::time_point t0 = Clock::now();
    rc |= fn(area, stream.Next(), n, value);
    const double s = SecondsSince(t0);
    *total += s;
    return s;
  };
  for (auto _ : state) {
    value += 1.0f;
    if (!logged) {
      state.SetIterationTime(time_batch(kind.plain, &plain_s));
    } else if (batches % 2 == 0) {
      time_batch(kind.plain, &plain_s);
      state.SetIterationTime(time_batch(kind.logged, &logged_s));
    } else {
      state.SetIterationTime(time_batch(kind.logged, &logged_s));
      time_batch(kind.plain, &plain_s);
    }
    ++batches;
  }
  if (rc != DSM_OK) {
    state.SkipWithError("dsm_log failed");
    return;
  }
  const double ops = static_cast<double>(batches * n);
  const double measured_s = logged ? logged_s : plain_s;
  state.counters["ns_per_op"] = measured_s * 1e9 / ops;
  if (kind.block_bytes >= kLineBytes) {
    state.counters["GB/s"] = ops * static_cast<double>(kind.block_bytes) / measured_s / 1e9;
  }
  if (logged) {
    state.counters["plain_ns_per_op"] = plain_s * 1e9 / ops;
    state.counters["x_plain"] = logged_s / plain_s;
  }
}

void RegisterAll() {
  static const StoreKind kinds[] = {
      {"1line/seq", sizeof(float), Pattern::kSequential, StoreBatch<false, 1>, StoreBatch<true, 1>},
      {"1line/rand", sizeof(float), Pattern::kRandom, StoreBatch<false, 1>, StoreBatch<true, 1>},
      {"1line/hot", sizeof(float), Pattern::kHot, StoreBatch<false, 1>, StoreBatch<true, 1>},
      {"1KiB/rand", 1024, Pattern::kRandom, StoreBatch<false, 256>, StoreBatch<true, 256>},
      {"1MiB/rand", size_t{1} << 20, Pattern::kRandom, StoreBatch<false, 262144>,
       StoreBatch<true, 262144>},
  };
  // Built once; the plain and logged runs of a kind continue the same stream.
  static std::vector<StoreStream> streams;
  streams.reserve(std::size(kinds));
  for (const StoreKind& kind : kinds) {
    streams.push_back(MakeStream(kind));
    StoreStream* stream = &streams.back();
    for (const bool logged : {false, true}) {
      const std::string name = "log/" + kind.name + (logged ? "/logged" : "/plain");
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&kind, stream, logged](benchmark::State& state) {
                                     RunStores(state, kind, *stream, logged);
                                   })
          ->UseManualTime()
          ->MinTime(0.3);
    }
  }
}

}  // namespace
}  // namespace dsm::bench

int main(int argc, char** argv) {
  dsm::bench::RegisterAll();
  return dsm::bench::RunWithPrivateDaemon(argc, argv);
}
