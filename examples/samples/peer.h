// What both samples do with their areas: publish a version even while local
// readers briefly hold every buffer, and leave without losing the last version.
#ifndef DSM_EXAMPLES_SAMPLES_PEER_H_
#define DSM_EXAMPLES_SAMPLES_PEER_H_

#include <dsm/dsm.h>

#include <chrono>
#include <cstdio>
#include <thread>

namespace samples {

// dsm_publish, retried while it answers DSM_ERR_BUSY (readers on this host still
// pin every spare buffer; they let go at their next quiescent point).
inline int PublishRetrying(const void* area, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const int rc = dsm_publish(area);
    if (rc != DSM_ERR_BUSY || std::chrono::steady_clock::now() > deadline) return rc;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

inline int Report(const char* who, const char* what, int rc) {
  std::fprintf(stderr, "%s: %s: %s: %s\n", who, what, dsm_strerror(rc), dsm_last_error());
  return 1;
}

}  // namespace samples

#endif  // DSM_EXAMPLES_SAMPLES_PEER_H_
