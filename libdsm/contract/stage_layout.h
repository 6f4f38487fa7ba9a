// Where an area's stage lies and the words of its handshake: a writer whose
// area has a stage hands each version to dsmd there, and dsmd writes it into
// a reader buffer (coherence/staged_lines.h, docs/region-layout.md).
#ifndef DSM_LIBDSM_CONTRACT_STAGE_LAYOUT_H_
#define DSM_LIBDSM_CONTRACT_STAGE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "coherence/constants.h"
#include "coherence/staged_lines.h"

namespace dsm {

// AreaControl::stage_state. The writer posts (kEmpty -> kPosted); dsmd takes
// a posted version and empties the stage. A version posted as masks is read
// from the writer copy, so the writer waits for it: dsmd marks it kApplying
// before it reads, and a writer that gives up first withdraws it (kPosted ->
// kCancelled; its masks then stay for the writer's next version). A version
// posted as lines that dsmd frames for other hosts straight from the stage
// is written into a buffer (visible) once its frames are out, and then held
// (kHeld) until no more are due; a writer that wants the stage (posted or
// held) sets stage_wanted and waits, and dsmd then writes and lets go of it
// at once.
enum class StageState : uint32_t {
  kEmpty = 0,
  kPosted = 1,
  kApplying = 2,
  kCancelled = 3,
  kHeld = 4
};
// AreaControl::stage_kind.
enum class StageKind : uint32_t { kLines = 1, kMasks = 2 };

// A stage: masks (one per 4 KiB page of the area), runs, then line bytes
// (cache-line aligned), rounded up to the backing's page.
struct StageGeometry {
  uint64_t pages = 0;
  uint64_t max_lines = 0;  // also the most runs
  uint64_t runs_offset = 0;
  uint64_t bytes_offset = 0;
  uint64_t bytes = 0;
};

inline StageGeometry StageGeometryFor(uint64_t area_size, uint64_t backing_page) {
  StageGeometry g;
  const uint64_t lines = (area_size + kLineBytes - 1) / kLineBytes;
  g.pages = (lines + kLinesPerPage - 1) / kLinesPerPage;
  g.max_lines = StageCapacityLines(lines);
  g.runs_offset = g.pages * sizeof(uint64_t);
  g.bytes_offset =
      (g.runs_offset + g.max_lines * sizeof(LineRun) + kLineBytes - 1) / kLineBytes * kLineBytes;
  const uint64_t end = g.bytes_offset + g.max_lines * kLineBytes;
  g.bytes = (end + backing_page - 1) / backing_page * backing_page;
  return g;
}

// The stage's parts, for the stage mapped at `base`.
inline StageMemory StageMemoryAt(uint8_t* base, const StageGeometry& g) {
  return StageMemory{reinterpret_cast<LineRun*>(base + g.runs_offset),
                     g.max_lines,
                     base + g.bytes_offset,
                     g.max_lines,
                     reinterpret_cast<uint64_t*>(base),
                     g.pages};
}

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_STAGE_LAYOUT_H_
