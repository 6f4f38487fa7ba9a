#include "coherence/staged_lines.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace dsm {

namespace {

// The lines of `runs` from `src`, one after another into `out` (plain stores:
// they stay in the cache for dsmd, which reads them next). A loop of its own,
// apart from draining the log, so that the loads of many lines are in flight
// at once: the writer's lines may have left its cache for the log's.
void GatherRuns(std::span<const LineRun> runs, const uint8_t* src, uint8_t* out) {
  for (const LineRun& r : runs) {
    const uint8_t* from = src + size_t{r.first_line} * kLineBytes;
    // One fixed-size copy per line: inlined, unlike a call per run.
    for (uint32_t i = 0; i < r.line_count; ++i) {
      std::memcpy(out, from + size_t{i} * kLineBytes, kLineBytes);
      out += kLineBytes;
    }
  }
}

}  // namespace

StagedCounts StageChanges(ChangeLog& log, const uint8_t* src, const StageMemory& stage,
                          bool as_masks) {
  const ChangeLog::TakenPages taken = log.TakePages();
  StagedCounts c;
  for (const uint64_t mask : taken.masks) c.lines += static_cast<size_t>(std::popcount(mask));
  // A version has no more runs than lines: if its lines fit, its runs do.
  c.as_masks = as_masks || c.lines > stage.max_lines || c.lines > stage.max_runs;
  if (c.as_masks) {
    for (size_t k = 0; k < taken.pages.size(); ++k) stage.masks[taken.pages[k]] |= taken.masks[k];
    return c;
  }
  for (size_t k = 0; k < taken.pages.size(); ++k) {
    const size_t page_first = size_t{taken.pages[k]} * kLinesPerPage;
    for (uint64_t mask = taken.masks[k]; mask != 0;) {
      const unsigned start = static_cast<unsigned>(std::countr_zero(mask));
      const uint64_t shifted = mask >> start;
      const unsigned len =
          shifted == ~uint64_t{0} ? 64 - start : static_cast<unsigned>(std::countr_one(shifted));
      const size_t first = page_first + start;
      LineRun* last = c.runs > 0 ? &stage.runs[c.runs - 1] : nullptr;
      if (last != nullptr && size_t{last->first_line} + last->line_count == first) {
        last->line_count += len;
      } else {
        stage.runs[c.runs++] = {static_cast<uint32_t>(first), len};
      }
      mask = len >= 64 ? 0 : mask & ~(((uint64_t{1} << len) - 1) << start);
    }
  }
  GatherRuns(std::span<const LineRun>(stage.runs, c.runs), src, stage.bytes);
  return c;
}

void AddRuns(std::span<const LineRun> runs, LineSet* set) {
  // Runs are in address order and mostly a line or two: gather each page's
  // lines into one mask and add it once (a stage holds thousands of runs).
  size_t page = SIZE_MAX;
  uint64_t mask = 0;
  for (const LineRun& r : runs) {
    const size_t first = r.first_line;
    const size_t count = r.line_count;
    const size_t lo = first % kLinesPerPage;
    if (first / kLinesPerPage != page) {
      if (mask != 0) set->AddMask(page, mask);
      page = first / kLinesPerPage;
      mask = 0;
    }
    if (lo + count <= kLinesPerPage && first + count <= set->lines()) {
      mask |= count == kLinesPerPage ? ~uint64_t{0} : ((uint64_t{1} << count) - 1) << lo;
    } else {
      set->AddLines(first, count);  // across pages (or past the end: clipped there)
    }
  }
  if (mask != 0) set->AddMask(page, mask);
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
