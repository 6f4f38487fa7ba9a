// A version's changed lines as a writer hands them to its host's dsmd, which
// writes them into a reader buffer (the area's stage, docs/region-layout.md).
// While they fit, the stage lists the lines as runs in address order with
// their bytes gathered one after another: the writer's publish is then a
// gather, and the writer goes on writing while dsmd scatters. A version too
// large for the stage goes as one mask per page instead, and dsmd copies its
// lines from the writer copy while the writer waits.
#ifndef DSM_COHERENCE_STAGED_LINES_H_
#define DSM_COHERENCE_STAGED_LINES_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "coherence/change_log.h"
#include "coherence/line_copy.h"
#include "coherence/line_set.h"

namespace dsm {

struct LineRun {
  uint32_t first_line;
  uint32_t line_count;
};

// A stage's memory, as the caller mapped it. `masks` (one per page of the
// area) are all zero between versions.
struct StageMemory {
  LineRun* runs;
  size_t max_runs;
  uint8_t* bytes;  // max_lines lines, 16-byte aligned (streaming stores)
  size_t max_lines;
  uint64_t* masks;
  size_t pages;
};

struct StagedCounts {
  size_t runs = 0;   // valid unless as_masks
  size_t lines = 0;  // lines changed
  bool as_masks = false;
};

// The stage's line capacity for an area of `lines` lines: a sixteenth of them
// (at least 64). Sparse versions, the updates ML makes, fit; a denser version
// is cheaper copied straight from the writer copy than gathered first.
inline size_t StageCapacityLines(size_t lines) { return lines / 16 > 64 ? lines / 16 : 64; }

// Drains `log` into `stage`: runs and bytes gathered from `src` (the writer
// copy) while they fit, otherwise (or if `as_masks`: the stage holds masks of
// a version withdrawn before, which this one joins) every line as masks.
StagedCounts StageChanges(ChangeLog& log, const uint8_t* src, const StageMemory& stage,
                          bool as_masks = false);

// Copies the stage's line bytes to their places in `dst` (area memory).
void ScatterRuns(std::span<const LineRun> runs, const uint8_t* bytes, uint8_t* dst,
                 LineStores stores);
// Moves a stage's masks into `set`, leaving them zero.
void TakeMasks(uint64_t* masks, size_t pages, LineSet* set);

}  // namespace dsm

#endif  // DSM_COHERENCE_STAGED_LINES_H_
