// The one clock libdsm and dsmd share: CLOCK_MONOTONIC, which is the same for
// every process on a host, so timestamps in shared memory compare across them.
#ifndef DSM_LIBDSM_CONTRACT_CLOCK_H_
#define DSM_LIBDSM_CONTRACT_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace dsm {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_CLOCK_H_
