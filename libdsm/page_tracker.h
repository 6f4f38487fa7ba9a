// Finds the pages of a writer copy that were written since the last look, for
// areas allocated with page tracking (dsm_alloc_opts.tracking). Two mechanisms:
// userfaultfd asynchronous write-protect read back with PAGEMAP_SCAN (the
// kernel marks pages written with no signal per fault), and mprotect with a
// SIGSEGV handler where that is missing (or when asked for). Both re-protect
// what they report, so each Collect returns the pages written since the last.
#ifndef DSM_LIBDSM_PAGE_TRACKER_H_
#define DSM_LIBDSM_PAGE_TRACKER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dsm/dsm.h"

namespace dsm {

class PageTracker {
 public:
  // Called with each written range, as byte offsets into the tracked range.
  using RangeFn = std::function<void(size_t offset, size_t bytes)>;

  // Starts tracking [addr, addr + bytes), a MAP_SHARED read-write mapping whose
  // page size is `page_bytes` (4 KiB or a huge page). Populates it first, so
  // the first interval reports only real writes. `wanted` is a dsm_page_tracker
  // (DSM_PAGE_TRACKER_AUTO: $DSM_PAGE_TRACKER, else uffd if the kernel has it,
  // else mprotect). Returns DSM_OK, or an error with dsm_last_error set.
  static int Start(int wanted, void* addr, size_t bytes, size_t page_bytes,
                   std::unique_ptr<PageTracker>* out);
  virtual ~PageTracker() = default;

  virtual dsm_page_tracker kind() const = 0;
  // Reports the ranges written since the last call and write-protects them
  // again. Call only when no thread of the process stores to the range (a
  // quiescent point). Returns DSM_OK or an error (tracking then is unreliable
  // and the caller must ship the whole range).
  virtual int Collect(const RangeFn& fn) = 0;
};

// Why userfaultfd write-protect tracking is unavailable here ("" if it works).
std::string UffdUnavailableReason();

// The mechanisms (each in its own file).
int StartUffdTracker(void* addr, size_t bytes, std::unique_ptr<PageTracker>* out);
int StartMprotectTracker(void* addr, size_t bytes, size_t page_bytes,
                         std::unique_ptr<PageTracker>* out);

}  // namespace dsm

#endif  // DSM_LIBDSM_PAGE_TRACKER_H_
