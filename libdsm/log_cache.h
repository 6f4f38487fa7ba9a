// The per-thread dsm_log() caches (include/dsm/dsm.h). Each thread's cache is
// registered when first filled, so that freeing an area can empty every cache
// that still points into its logs, in every thread.
#ifndef DSM_LIBDSM_LOG_CACHE_H_
#define DSM_LIBDSM_LOG_CACHE_H_

#include <cstdint>
#include <memory>

namespace dsm {

// Points the calling thread's cache at its log of an area (ChangeLog::bits()
// and summary()).
void FillLogCache(uintptr_t base, uint64_t size, uint8_t* bits, uint8_t* summary);
// Empties the caches of all threads that point at the area at `base`.
void ForgetLogCaches(uintptr_t base);
// Empties every thread's cache (session teardown).
void ForgetAllLogCaches();
// A token of the calling thread that expires when the thread exits: a
// writer area hands a thread's log to another thread once its owner's token
// has expired.
std::weak_ptr<const void> ThisThreadToken();

}  // namespace dsm

#endif  // DSM_LIBDSM_LOG_CACHE_H_
