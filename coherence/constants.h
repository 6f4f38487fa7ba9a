// Tunables and layout constants shared by every layer. Units are in the names.
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
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// The region: one virtual range at the same address in every process on every host.
// Each host id owns one slice of it and allocates its areas there.
inline constexpr uintptr_t kRegionBase = 0x500000000000ULL;
inline constexpr size_t kHostSliceBytes = size_t{64} << 30;
inline constexpr uint32_t kMaxHosts = 64;
inline constexpr size_t kRegionBytes = kHostSliceBytes * kMaxHosts;

// Per-host limits of the shared control segment.
inline constexpr uint32_t kMaxAreas = 1024;
inline constexpr uint32_t kMaxReadersPerArea = 64;
inline constexpr uint32_t kMaxReaderBuffers = 4;
inline constexpr uint32_t kDefaultReaderBuffers = 2;
inline constexpr size_t kMaxNameBytes = 64;  // including the terminating NUL

// Defaults a daemon flag or an alloc option can override.
inline constexpr uint32_t kDefaultSyncIntervalUs = 1000;
inline constexpr uint32_t kDefaultStalenessBoundMs = 100;

}  // namespace dsm

#endif  // DSM_COHERENCE_CONSTANTS_H_
