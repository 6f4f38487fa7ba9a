#include "libdsm/page_tracker.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "libdsm/errors.h"
#include "libdsm/linux_uapi_compat.h"
#include "libdsm/contract/tracking_names.h"

namespace dsm {

namespace {

// $DSM_PAGE_TRACKER for AUTO: "uffd", "mprotect", or unset/"auto".
int FromEnvironment() {
  const char* v = std::getenv("DSM_PAGE_TRACKER");
  if (!v) return DSM_PAGE_TRACKER_AUTO;
  const std::string_view s(v);
  if (s == "uffd") return DSM_PAGE_TRACKER_UFFD;
  if (s == "mprotect") return DSM_PAGE_TRACKER_MPROTECT;
  return DSM_PAGE_TRACKER_AUTO;
}

}  // namespace

int PageTracker::Start(int wanted, void* addr, size_t bytes, size_t page_bytes,
                       std::unique_ptr<PageTracker>* out) {
  if (wanted == DSM_PAGE_TRACKER_AUTO) wanted = FromEnvironment();
  // Populate before arming: populating after would report every page written,
  // and first touches would cost a page fault on top of the tracking fault.
  if (madvise(addr, bytes, MADV_POPULATE_WRITE) != 0) {
    return Fail(DSM_ERR_SYSTEM, "cannot populate the area for page tracking: {}",
                std::strerror(errno));
  }
  if (wanted == DSM_PAGE_TRACKER_MPROTECT) return StartMprotectTracker(addr, bytes, page_bytes, out);
  const int rc = StartUffdTracker(addr, bytes, out);
  if (rc == DSM_OK || wanted == DSM_PAGE_TRACKER_UFFD) return rc;
  return StartMprotectTracker(addr, bytes, page_bytes, out);
}

}  // namespace dsm

extern "C" const char* dsm_page_tracker_name(int tracker) {
  if (tracker == DSM_PAGE_TRACKER_AUTO) return "auto";  // asked for, never in use
  return tracker < 0 ? "unknown" : dsm::PageTrackerName(static_cast<uint32_t>(tracker));
}
