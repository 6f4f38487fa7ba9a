// The coherence protocol's units: lines and the pages of change summaries.
// Units are in the names.
#ifndef DSM_COHERENCE_CONSTANTS_H_
#define DSM_COHERENCE_CONSTANTS_H_

#include <cstddef>
#include <cstdint>

#include "dsm/dsm.h"

namespace dsm {

// A line is the unit of change tracking and of transfer.
inline constexpr size_t kLineBytes = size_t{1} << DSM_LINE_SHIFT;
// The change log's summary level keeps one byte per this many lines (one 4 KiB page).
inline constexpr size_t kLinesPerPage = size_t{1} << DSM_LINES_PER_PAGE_SHIFT;
inline constexpr size_t kPageBytes = 4096;
// The longest name of an area, including the terminating NUL (directory
// frames carry names).
inline constexpr size_t kMaxNameBytes = 64;

}  // namespace dsm

#endif  // DSM_COHERENCE_CONSTANTS_H_
