// The per-thread dsm_log() caches (include/dsm/dsm.h). Each thread's cache is
// registered when first filled, so that freeing an area can empty every cache
// that still points into its log, in every thread.
#ifndef DSM_LIBDSM_LOG_CACHE_H_
#define DSM_LIBDSM_LOG_CACHE_H_

#include <cstdint>

namespace dsm {

// Points the calling thread's cache at an area's log.
void FillLogCache(uintptr_t base, uint64_t size, uint8_t* lines, uint8_t* pages);
// Empties the caches of all threads that point at the area at `base`.
void ForgetLogCaches(uintptr_t base);
// Empties every thread's cache (session teardown).
void ForgetAllLogCaches();

}  // namespace dsm

#endif  // DSM_LIBDSM_LOG_CACHE_H_
