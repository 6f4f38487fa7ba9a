// Lines from pages: which 64-byte lines of a written range really differ from
// the last published version. Page tracking learns only that a page was
// written; comparing it with the reader copy at line granularity is what keeps
// unchanged lines (and pages rewritten with equal bytes) off the wire.
#ifndef DSM_COHERENCE_LINE_DIFF_H_
#define DSM_COHERENCE_LINE_DIFF_H_

#include <cstddef>
#include <cstdint>

#include "coherence/change_log.h"

namespace dsm {

// Marks in `log` each line touched by [offset, offset + bytes) whose bytes in
// `current` differ from those in `published` (both point at the area's first
// byte). Bytes past the log's area are neither read nor marked. Returns the
// number of lines found different (marked now or already).
size_t MarkChangedLines(const uint8_t* current, const uint8_t* published, size_t offset,
                        size_t bytes, ChangeLog* log);

}  // namespace dsm

#endif  // DSM_COHERENCE_LINE_DIFF_H_
