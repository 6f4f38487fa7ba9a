// The region and the per-host limits of the control segment: what every
// process on every host must agree on. Units are in the names.
#ifndef DSM_LIBDSM_CONTRACT_REGION_LIMITS_H_
#define DSM_LIBDSM_CONTRACT_REGION_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace dsm {

// The region: one virtual range at the same address in every process on every host.
// Each host id owns one slice of it and allocates its areas there.
inline constexpr uintptr_t kRegionBase = 0x500000000000ULL;
inline constexpr size_t kHostSliceBytes = size_t{64} << 30;
inline constexpr uint32_t kMaxHosts = 64;
inline constexpr size_t kRegionBytes = kHostSliceBytes * kMaxHosts;
// Every area takes its addresses in whole granules of the largest backing page
// (2 MiB hugepages), whatever its own host's backing: a host whose backing
// pages are larger than the origin's can still map the replica at the same
// address, rounded up to its own page, without touching a neighbour's range.
inline constexpr size_t kAreaAddressGranuleBytes = size_t{2} << 20;

// Per-host limits of the shared control segment.
inline constexpr uint32_t kMaxAreas = 1024;
inline constexpr uint32_t kMaxReadersPerArea = 64;
inline constexpr uint32_t kMaxReaderBuffers = 4;
inline constexpr uint32_t kDefaultReaderBuffers = 2;

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_REGION_LIMITS_H_
