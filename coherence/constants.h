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
// Lines per page: a line set (and a change log) keeps one 64-bit mask per page.
inline constexpr size_t kLinesPerPage = size_t{1} << DSM_LINES_PER_PAGE_SHIFT;
inline constexpr size_t kPageBytes = 4096;
// The change log keeps one summary byte per this many lines (a 64-byte line of
// its bits).
inline constexpr size_t kLinesPerSummary = size_t{1} << DSM_LINES_PER_SUMMARY_SHIFT;
// The longest name of an area, including the terminating NUL (directory
// frames carry names).
inline constexpr size_t kMaxNameBytes = 64;

}  // namespace dsm

#endif  // DSM_COHERENCE_CONSTANTS_H_
