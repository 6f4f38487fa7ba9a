// What the microbenchmarks share: a private dsmd and dsm_init() around the
// Google Benchmark run, scratch buffers outside the region, seeded line
// selection and manual timing. Figures are reported as ratios against a
// reference (plain stores, memcpy) measured in the same run.
#ifndef DSM_BENCH_BENCH_SUPPORT_H_
#define DSM_BENCH_BENCH_SUPPORT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "coherence/constants.h"
#include "dsm/dsm.h"

namespace dsm::bench {

// The area size every benchmark uses unless it says otherwise.
inline constexpr size_t kAreaBytes = size_t{64} << 20;
inline constexpr size_t kAreaLines = kAreaBytes / kLineBytes;
inline constexpr size_t kFloatsPerLine = kLineBytes / sizeof(float);
// Backing for the private dsmd: an area costs (1 + 2 reader buffers) x its size.
inline constexpr const char* kDaemonRegionSize = "1G";
// Seed of every random choice, so runs are comparable.
inline constexpr uint64_t kSeed = 0x5eed'd5a0'0000'0001ULL;

// Initializes Google Benchmark from argv, starts a private dsmd (memfd backing,
// its own socket, $DSM_DSMD or the dsmd of this build), exports DSM_SOCKET,
// calls dsm_init(), runs the registered benchmarks, then dsm_fini() and stops
// the daemon. Returns the process exit code: non-zero with a message on stderr
// if the daemon or dsm_init fails.
int RunWithPrivateDaemon(int argc, char** argv);

// A page-aligned anonymous private mapping (not in the shared region), written
// once so that no page fault lands in a timed section. 4 KiB pages, like the
// memfd backing of the areas, so references and areas pay the same TLB costs.
class Buffer {
 public:
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

// Allocates area `name` of `bytes`, writes every byte, logs it all and publishes
// twice, so that the writer copy and both reader buffers are populated and no
// page fault lands in a timed section. `opts` as for dsm_alloc (may be null).
// Returns nullptr and prints why on failure.
void* AllocWarmArea(const char* name, size_t bytes, const dsm_alloc_opts* opts = nullptr);

// Picks `count` distinct lines of [0, lines) uniformly at random, sorted.
// `count == lines` gives every line.
std::vector<uint32_t> PickLines(std::mt19937_64& rng, size_t lines, size_t count);

// Writes one float in each listed line of `base`, pulling the lines into the
// cache the way the stores of a training step would. Returns nothing the
// compiler may drop: the memory is clobbered afterwards.
void TouchLines(uint8_t* base, const std::vector<uint32_t>& lines, float value);

using Clock = std::chrono::steady_clock;
inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace dsm::bench

#endif  // DSM_BENCH_BENCH_SUPPORT_H_
