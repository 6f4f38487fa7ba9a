#include "coherence/staged_lines.h"

#include <algorithm>
#include <cstring>

namespace dsm {

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
  uint8_t* out = stage.bytes;
  size_t listed = 0, copied = 0, runs = 0;
  uint64_t next = UINT64_MAX;  // the line that would extend the last run
  const size_t pages = taken.pages.size();
  for (size_t k = 0; k < pages; k += kPagesPerStep) {
    const size_t n = std::min(kPagesPerStep, pages - k);
    listed +=
        ChangeLog::ListLines(taken.pages.subspan(k, n), taken.masks.subspan(k, n), list + listed);
    const size_t until = k + n == pages ? listed : listed - std::min(listed, kGatherAhead);
    // The runs, and the lines' bytes one after another (plain stores: they
    // stay in the cache for dsmd, which reads them next), with no branch on
    // where a run ends. Past the list's end the prefetches ask for stale
    // entries, which cost a wasted fetch and no fault.
    for (; copied < until; ++copied) {
      const uint32_t line = list[copied];
      __builtin_prefetch(src + size_t{list[copied + kGatherAhead]} * kLineBytes);
      const bool extends = line == next;
      runs -= extends;
      stage.runs[runs].line_count = extends ? stage.runs[runs].line_count + 1 : 1;
      stage.runs[runs].first_line = extends ? stage.runs[runs].first_line : line;
      ++runs;
      next = uint64_t{line} + 1;
      std::memcpy(out, src + size_t{line} * kLineBytes, kLineBytes);
      out += kLineBytes;
    }
  }
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
