#include "coherence/staged_lines.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace dsm {

namespace {

void StreamRun(LineRun* at, uint32_t first_line, uint32_t line_count) {
  static_assert(sizeof(LineRun) == 8 && offsetof(LineRun, first_line) == 0);
  _mm_stream_si64(reinterpret_cast<long long*>(at),
                  static_cast<long long>(uint64_t{line_count} << 32 | first_line));
}

}  // namespace

StagedCounts StageChanges(ChangeLog& log, const uint8_t* src, const StageMemory& stage,
                          bool as_masks) {
  // A version has no more runs than lines: if its lines fit, its runs do.
  const size_t fits = as_masks ? 0 : std::min(stage.max_lines, stage.max_runs);
  const ChangeLog::TakenPages taken = log.TakePages();
  StagedCounts c;
  c.lines = taken.lines;
  c.as_masks = as_masks || c.lines > fits;
  if (c.as_masks) {
    for (size_t k = 0; k < taken.pages.size(); ++k) {
      stage.masks[taken.pages[k]] |= taken.masks[k];
    }
    return c;
  }
  if (c.lines == 0) return c;
  // The lines are scattered over the area, where no hardware prefetcher
  // follows them: each is asked for this many lines ahead of its copy, so
  // that their misses overlap (publish_bench at 1%: median 120-164 -> 109-115
  // us; 8 ahead gained little, 16-64 about the same).
  constexpr size_t kGatherAhead = 32;
  // The list, the runs and the gather go a few pages at a time, so that
  // listing the next pages' lines runs while the copies wait for memory.
  constexpr size_t kPagesPerStep = 16;
  uint32_t* const list = log.ListRoom(c.lines, kGatherAhead + ChangeLog::kListSlack);
  // Streaming stores for the runs and the bytes: dsmd, on another core, read
  // the stage last, and an ordinary store would first take each line back
  // from its cache (publish_bench at 1%, only storing to the bytes: 60-90 us
  // plain, 22-27 us streaming, but 10 us when dsmd had run on this core).
  uint8_t* out = stage.bytes;
  size_t listed = 0, copied = 0, runs = 0;
  // The run being extended, kept in registers and stored once it ends.
  uint32_t run_first = 0, run_count = 0;
  const size_t pages = taken.pages.size();
  for (size_t k = 0; k < pages; k += kPagesPerStep) {
    const size_t n = std::min(kPagesPerStep, pages - k);
    listed +=
        ChangeLog::ListLines(taken.pages.subspan(k, n), taken.masks.subspan(k, n), list + listed);
    const size_t until = k + n == pages ? listed : listed - std::min(listed, kGatherAhead);
    // Past the list's end the prefetches ask for stale entries, which cost a
    // wasted fetch and no fault.
    for (; copied < until; ++copied) {
      const uint32_t line = list[copied];
      __builtin_prefetch(src + size_t{list[copied + kGatherAhead]} * kLineBytes);
      if (line != run_first + run_count) {
        if (run_count != 0) StreamRun(&stage.runs[runs++], run_first, run_count);
        run_first = line;
        run_count = 0;
      }
      ++run_count;
      StreamLine(out, src + size_t{line} * kLineBytes);
      out += kLineBytes;
    }
  }
  StreamRun(&stage.runs[runs++], run_first, run_count);  // lines > 0: one run at least
  StoreFence();  // before the caller posts the version
  c.runs = runs;
  return c;
}

void ScatterRuns(std::span<const LineRun> runs, const uint8_t* bytes, uint8_t* dst,
                 LineStores stores) {
  for (const LineRun& r : runs) {
    const size_t n = size_t{r.line_count} * kLineBytes;
    CopyLines(dst + size_t{r.first_line} * kLineBytes, bytes, n, stores);
    bytes += n;
  }
}

void TakeMasks(uint64_t* masks, size_t pages, LineSet* set) {
  for (size_t page = 0; page < pages; ++page) {
    if (masks[page] != 0) {
      set->AddMask(page, masks[page]);
      masks[page] = 0;
    }
  }
}

}  // namespace dsm
