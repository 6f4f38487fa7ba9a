#include "bench/bench_support.h"

#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "dsm/dsm.h"
#include "tests/support/dsmd_process.h"

namespace dsm::bench {

int RunWithPrivateDaemon(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
#ifdef DSM_BENCH_DEFAULT_DSMD
  // Run straight from the build tree: the dsmd built next to this benchmark.
  setenv("DSM_DSMD", DSM_BENCH_DEFAULT_DSMD, /*overwrite=*/0);
#endif
  const std::string dsmd = testing::DsmdBinary();
  // $DSM_BENCH_DSMD_ARGS: more dsmd arguments, space-separated (for example
  // "--no-stages", to compare with writers that write the buffers themselves).
  std::vector<std::string> args = {"--region-size", kDaemonRegionSize};
  std::string extra;
  if (const char* e = std::getenv("DSM_BENCH_DSMD_ARGS")) {
    std::istringstream words(e);
    for (std::string w; words >> w;) {
      args.push_back(w);
      extra += " " + w;
    }
  }
  testing::DsmdProcess daemon(args);
  if (!daemon.ok()) {
    std::fprintf(stderr,
                 "%s: could not start a private dsmd ('%s'). Set DSM_DSMD to the dsmd binary "
                 "(e.g. build/daemon/dsmd) or run scripts/bench.sh\n",
                 argv[0], dsmd.c_str());
    return 2;
  }
  daemon.ExportSocket();
  if (const int rc = dsm_init(nullptr); rc != DSM_OK) {
    std::fprintf(stderr, "%s: dsm_init against the private dsmd at %s failed: %s: %s\n", argv[0],
                 daemon.socket_path().c_str(), dsm_strerror(rc), dsm_last_error());
    return 2;
  }
  benchmark::AddCustomContext("dsm_backing", "memfd (private dsmd)");
  if (!extra.empty()) benchmark::AddCustomContext("dsmd_args", extra.substr(1));
  benchmark::AddCustomContext("dsm_area_bytes", std::to_string(kAreaBytes));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const int fini = dsm_fini();
  const int stopped = daemon.Stop();
  if (fini != DSM_OK) {
    std::fprintf(stderr, "%s: dsm_fini failed: %s: %s\n", argv[0], dsm_strerror(fini),
                 dsm_last_error());
    return 1;
  }
  if (stopped != 0) {
    std::fprintf(stderr, "%s: the private dsmd did not exit cleanly (wait status %d)\n", argv[0],
                 stopped);
    return 1;
  }
  return 0;
}

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "bench: cannot map %zu bytes: %s\n", bytes, std::strerror(errno));
    std::abort();
  }
  // Same page size as the memfd backing: no transparent hugepages here.
  madvise(p, bytes, MADV_NOHUGEPAGE);
  data_ = static_cast<uint8_t*>(p);
  std::memset(data_, 1, bytes_);
}

Buffer::~Buffer() { munmap(data_, bytes_); }

void* AllocWarmArea(const char* name, size_t bytes, const dsm_alloc_opts* opts) {
  void* area = nullptr;
  if (const int rc = dsm_alloc(name, bytes, opts, &area); rc != DSM_OK) {
    std::fprintf(stderr, "bench: dsm_alloc('%s', %zu): %s: %s\n", name, bytes, dsm_strerror(rc),
                 dsm_last_error());
    return nullptr;
  }
  std::memset(area, 1, bytes);
  for (int round = 0; round < 2; ++round) {
    dsm_log(area, bytes);
    if (const int rc = dsm_publish(area); rc != DSM_OK) {
      std::fprintf(stderr, "bench: warm-up publish of '%s': %s: %s\n", name, dsm_strerror(rc),
                   dsm_last_error());
      dsm_free(area);
      return nullptr;
    }
  }
  return area;
}

std::vector<uint32_t> PickLines(std::mt19937_64& rng, size_t lines, size_t count) {
  std::vector<uint32_t> picked;
  picked.reserve(count);
  if (count >= lines) {
    for (size_t i = 0; i < lines; ++i) picked.push_back(static_cast<uint32_t>(i));
    return picked;
  }
  // Rejection sampling: at most half the lines are picked here in practice,
  // so the expected number of draws stays below 2 x count.
  std::vector<bool> taken(lines);
  std::uniform_int_distribution<uint32_t> dist(0, static_cast<uint32_t>(lines - 1));
  while (picked.size() < count) {
    const uint32_t line = dist(rng);
    if (taken[line]) continue;
    taken[line] = true;
    picked.push_back(line);
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

void TouchLines(uint8_t* base, const std::vector<uint32_t>& lines, float value) {
  for (uint32_t line : lines) {
    std::memcpy(base + size_t{line} * kLineBytes, &value, sizeof(value));
  }
  benchmark::ClobberMemory();
}

}  // namespace dsm::bench
