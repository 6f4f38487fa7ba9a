#include "libdsm/errors.h"

#include "dsm/dsm.h"

namespace dsm {

namespace {
thread_local std::string t_last_error;
}

void SetLastError(std::string message) { t_last_error = std::move(message); }
const char* LastError() { return t_last_error.c_str(); }
std::string TakeLastError() {
  std::string m = std::move(t_last_error);
  t_last_error.clear();
  return m;
}

}  // namespace dsm

extern "C" const char* dsm_strerror(int status) {
  switch (status) {
    case DSM_OK: return "ok";
    case DSM_ERR_INVALID: return "invalid argument or use";
    case DSM_ERR_NO_DAEMON: return "no dsmd is running";
    case DSM_ERR_EXISTS: return "already exists";
    case DSM_ERR_NOT_FOUND: return "not found";
    case DSM_ERR_NO_SPACE: return "no space left in the region";
    case DSM_ERR_TIMEOUT: return "timed out";
    case DSM_ERR_BUSY: return "busy, retry later";
    case DSM_ERR_NOT_INIT: return "dsm_init() has not been called";
    case DSM_ERR_ADDRESS: return "region address already in use";
    case DSM_ERR_SYSTEM: return "system call failed";
    case DSM_ERR_PROTOCOL: return "protocol mismatch with dsmd";
    case DSM_ERR_DAEMON_GONE: return "dsmd has stopped";
    case DSM_ERR_NOT_OWNER: return "not the area's writer";
    default: return "unknown status";
  }
}

extern "C" const char* dsm_last_error(void) { return dsm::LastError(); }
