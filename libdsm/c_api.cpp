// The C API: argument checks, the process's one ClientSession, and the rule
// that every failing call leaves its own message for dsm_last_error().
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "dsm/dsm.h"
#include "libdsm/errors.h"
#include "libdsm/quiescence_gate.h"
#include "libdsm/session.h"

namespace {

std::mutex g_init_mu;
std::unique_ptr<dsm::ClientSession> g_session_owner;
std::atomic<dsm::ClientSession*> g_session{nullptr};

dsm::ClientSession* Current() { return g_session.load(std::memory_order_acquire); }

int NotInit(const char* fn) {
  return dsm::Fail(DSM_ERR_NOT_INIT, "{}: call dsm_init() first", fn);
}

// Runs the body of the C call `fn`. The body starts with no message; a failure
// that sets none gets one naming the call, so after a failed call
// dsm_last_error() is never an earlier call's message. A call that succeeds
// leaves the message of the thread's earlier failure (and drops any its own
// steps set on the way, such as a retried lookup).
template <typename Body>
int Run(const char* fn, Body&& body) {
  std::string earlier = dsm::TakeLastError();
  const int rc = body();
  if (rc == DSM_OK) {
    dsm::SetLastError(std::move(earlier));
  } else if (*dsm::LastError() == '\0') {
    dsm::Fail(rc, "{}: {}", fn, dsm_strerror(rc));
  }
  return rc;
}

int GetVersion(const char* fn, const void* area, uint64_t* version) {
  return Run(fn, [&] {
    dsm::ClientSession* s = Current();
    return s ? s->Version(fn, area, version) : NotInit(fn);
  });
}

}  // namespace

extern "C" {

int dsm_init(const dsm_init_opts* opts) {
  return Run("dsm_init", [&]() -> int {
    std::lock_guard lock(g_init_mu);
    if (g_session_owner) {
      return dsm::Fail(DSM_ERR_INVALID, "dsm_init: already initialized in this process; call "
                       "dsm_fini() first to start again");
    }
    std::unique_ptr<dsm::ClientSession> s;
    if (int rc = dsm::ClientSession::Open(opts, &s); rc != DSM_OK) return rc;
    g_session_owner = std::move(s);
    g_session.store(g_session_owner.get(), std::memory_order_release);
    return DSM_OK;
  });
}

int dsm_fini(void) {
  return Run("dsm_fini", [&]() -> int {
    std::lock_guard lock(g_init_mu);
    if (!g_session_owner) return NotInit("dsm_fini");
    g_session_owner->PublishAll();
    g_session.store(nullptr, std::memory_order_release);
    g_session_owner.reset();
    return DSM_OK;
  });
}

int dsm_alloc(const char* name, size_t size, const dsm_alloc_opts* opts, void** out) {
  return Run("dsm_alloc", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->Alloc(name, size, opts, nullptr, out) : NotInit("dsm_alloc");
  });
}

int dsm_alloc_managed(const char* name, size_t size, const dsm_alloc_opts* opts,
                      const dsm_managed_opts* managed, void** out) {
  return Run("dsm_alloc_managed", [&] {
    dsm::ClientSession* s = Current();
    if (!s) return NotInit("dsm_alloc_managed");
    if (!managed) {
      return dsm::Fail(DSM_ERR_INVALID,
                       "dsm_alloc_managed: managed is NULL (use dsm_alloc for "
                       "an area sent whole)");
    }
    return s->Alloc(name, size, opts, managed, out);
  });
}

int dsm_attach(const char* name, uint32_t timeout_ms, const void** out, size_t* out_size) {
  return Run("dsm_attach", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->Attach(name, timeout_ms, out, out_size) : NotInit("dsm_attach");
  });
}

int dsm_free(const void* area) {
  return Run("dsm_free", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->Free(area) : NotInit("dsm_free");
  });
}

int dsm_service(void) {
  return Run("dsm_service", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->Service() : NotInit("dsm_service");
  });
}

int dsm_publish(const void* area) {
  return Run("dsm_publish", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->Publish(area) : NotInit("dsm_publish");
  });
}

int dsm_thread_offline(void) {
  dsm::QuiescenceGate::Instance().Offline();
  return DSM_OK;
}

int dsm_thread_online(void) {
  dsm::QuiescenceGate::Instance().Online();
  return DSM_OK;
}

int dsm_get_version(const void* area, uint64_t* version) {
  return GetVersion("dsm_get_version", area, version);
}

uint64_t dsm_version(const void* area) {
  uint64_t v = 0;
  GetVersion("dsm_version", area, &v);  // on failure v stays 0
  return v;
}

int dsm_status(const void* area, dsm_area_status* st) {
  return Run("dsm_status", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->Status(area, st) : NotInit("dsm_status");
  });
}

int dsm_status_managed(const void* area, dsm_managed_status* st) {
  return Run("dsm_status_managed", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->ManagedStatus(area, st) : NotInit("dsm_status_managed");
  });
}

int dsm_wait_version(const void* area, uint64_t v, uint32_t timeout_ms) {
  return Run("dsm_wait_version", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->WaitVersion(area, v, timeout_ms) : NotInit("dsm_wait_version");
  });
}

int dsm__log_slow(const void* ptr, size_t len) {
  return Run("dsm_log", [&] {
    dsm::ClientSession* s = Current();
    return s ? s->LogSlow(ptr, len) : NotInit("dsm_log");
  });
}

}  // extern "C"
