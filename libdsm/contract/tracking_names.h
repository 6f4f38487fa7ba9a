// Names of the tracking modes and page trackers, for dsm_page_tracker_name()
// and dsmctl (which reads them from the shared AreaControl).
#ifndef DSM_LIBDSM_CONTRACT_TRACKING_NAMES_H_
#define DSM_LIBDSM_CONTRACT_TRACKING_NAMES_H_

#include <cstdint>

#include "dsm/dsm.h"

namespace dsm {

inline const char* PageTrackerName(uint32_t tracker) {
  switch (tracker) {
    case DSM_PAGE_TRACKER_NONE: return "none";
    case DSM_PAGE_TRACKER_UFFD: return "uffd-wp-async";
    case DSM_PAGE_TRACKER_MPROTECT: return "mprotect";
    default: return "unknown";
  }
}

inline const char* TrackingName(uint32_t tracking) {
  switch (tracking) {
    case DSM_TRACK_LOG: return "log";
    case DSM_TRACK_PAGES: return "pages";
    case DSM_TRACK_LOG_AND_PAGES: return "log+pages";
    default: return "unknown";
  }
}

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_TRACKING_NAMES_H_
