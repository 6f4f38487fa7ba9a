#include "libdsm/log_cache.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "coherence/change_log.h"
#include "dsm/dsm.h"

__thread dsm_log_cache dsm__tls_log_cache __attribute__((tls_model("initial-exec")));

namespace dsm {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<dsm_log_cache*> caches;
};
// Never destroyed: threads may exit after static destructors ran.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

struct ThreadEntry {
  bool registered = false;
  ~ThreadEntry() {
    if (!registered) return;
    std::lock_guard lock(registry().mu);
    std::erase(registry().caches, &dsm__tls_log_cache);
  }
};
thread_local ThreadEntry t_entry;
thread_local const std::shared_ptr<const void> t_token = std::make_shared<char>(0);

}  // namespace

void FillLogCache(uintptr_t base, uint64_t size, uint8_t* bits, uint8_t* summary) {
  std::lock_guard lock(registry().mu);
  if (!t_entry.registered) {
    registry().caches.push_back(&dsm__tls_log_cache);
    t_entry.registered = true;
  }
  dsm_log_cache& c = dsm__tls_log_cache;
  c.size = 0;  // never valid with a half-updated base
  c.base = base;
  c.bits = bits;
  c.summary = summary;
  c.size = size;
}

void ForgetLogCaches(uintptr_t base) {
  std::lock_guard lock(registry().mu);
  for (dsm_log_cache* c : registry().caches) {
    if (c->base == base) c->size = 0;
  }
}

void ForgetAllLogCaches() {
  std::lock_guard lock(registry().mu);
  for (dsm_log_cache* c : registry().caches) c->size = 0;
}

std::weak_ptr<const void> ThisThreadToken() { return t_token; }

}  // namespace dsm

// dsm_log()'s path for a range of lines: the cache was checked by the caller.
void dsm__log_lines(uintptr_t first, uintptr_t last) {
  const dsm_log_cache& c = dsm__tls_log_cache;
  dsm::MarkLineBits(c.bits, c.summary, first, last - first + 1);
}
