// Page tracking by mprotect: the range is made read-only; the first store to a
// page faults, and the SIGSEGV handler records the page and makes it writable.
// Collect re-protects what was recorded. Slower than userfaultfd (a signal per
// first store, a VMA split per written run), and system calls that write into
// a protected page fail with EFAULT instead of faulting; it is the fallback.
//
// One process-wide handler serves every tracked range. Faults outside them go
// to the handler that was installed before ours (the program's own), or, when
// that was the default action, re-raise with the default action.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "coherence/constants.h"
#include "libdsm/contract/region_limits.h"
#include "libdsm/errors.h"
#include "libdsm/page_tracker.h"

namespace dsm {

namespace {

// A tracked range as the signal handler sees it. `base` is stored last (release)
// when a slot is filled and first (to 0) when it is emptied.
struct TrackedRange {
  std::atomic<uintptr_t> base{0};
  size_t bytes = 0;
  unsigned page_shift = 0;
  uint8_t* written = nullptr;  // one byte per page
  bool reserved = false;       // owned by a tracker (guarded by g_mu)
};

TrackedRange g_ranges[kMaxAreas];
std::atomic<size_t> g_slots_used{0};  // high-water mark of g_ranges in use
std::mutex g_mu;                      // slot assignment and handler installation
bool g_installed = false;
struct sigaction g_previous;          // the handler before ours

void Chain(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN) {
    // Restore the default and return: the faulting instruction runs again and
    // the kernel delivers the signal with its default action (a core dump).
    signal(sig, SIG_DFL);
    return;
  }
  g_previous.sa_handler(sig);
}

void OnSegv(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (info->si_code == SEGV_ACCERR) {
    const size_t used = g_slots_used.load(std::memory_order_acquire);
    for (size_t i = 0; i < used; ++i) {
      TrackedRange& r = g_ranges[i];
      const uintptr_t base = r.base.load(std::memory_order_acquire);
      if (base == 0 || addr - base >= r.bytes) continue;
      const size_t page = (addr - base) >> r.page_shift;
      // Record before unprotecting: a page is never writable and unrecorded.
      r.written[page] = 1;
      const bool ok = mprotect(reinterpret_cast<void*>(base + (page << r.page_shift)),
                               size_t{1} << r.page_shift, PROT_READ | PROT_WRITE) == 0;
      errno = saved_errno;
      if (ok) return;
      break;  // cannot unprotect: let the program's handler or the default act
    }
  }
  errno = saved_errno;
  Chain(sig, info, context);
}

int InstallHandlerLocked() {
  if (g_installed) return DSM_OK;
  struct sigaction sa {};
  sa.sa_sigaction = OnSegv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &g_previous) != 0) {
    return Fail(DSM_ERR_SYSTEM, "cannot install the SIGSEGV handler for page tracking: {}",
                std::strerror(errno));
  }
  g_installed = true;
  return DSM_OK;
}

class MprotectPageTracker final : public PageTracker {
 public:
  MprotectPageTracker(TrackedRange* slot, uintptr_t addr, size_t bytes, unsigned page_shift)
      : slot_(slot), addr_(addr), bytes_(bytes), page_shift_(page_shift),
        pages_(bytes >> page_shift), written_(new uint8_t[pages_ + 8]()) {}

  ~MprotectPageTracker() override {
    std::lock_guard lock(g_mu);
    slot_->base.store(0, std::memory_order_release);
    slot_->reserved = false;
    // Leave the mapping writable: the area may outlive tracking (dsm_fini).
    mprotect(reinterpret_cast<void*>(addr_), bytes_, PROT_READ | PROT_WRITE);
  }

  // Arms: the slot is filled, then the range made read-only.
  int Arm() {
    slot_->bytes = bytes_;
    slot_->page_shift = page_shift_;
    slot_->written = written_.get();
    slot_->base.store(addr_, std::memory_order_release);
    if (mprotect(reinterpret_cast<void*>(addr_), bytes_, PROT_READ) != 0) {
      return Fail(DSM_ERR_SYSTEM, "page tracking by mprotect: {}", std::strerror(errno));
    }
    return DSM_OK;
  }

  dsm_page_tracker kind() const override { return DSM_PAGE_TRACKER_MPROTECT; }

  int Collect(const RangeFn& fn) override {
    size_t page = 0;
    while (page < pages_) {
      // Skip unwritten pages eight at a time (the array is zero padded).
      uint64_t word;
      std::memcpy(&word, written_.get() + page, 8);
      if (word == 0 && (page & 7) == 0) {
        page += 8;
        continue;
      }
      if (!written_[page]) {
        ++page;
        continue;
      }
      size_t run_end = page;
      while (run_end < pages_ && written_[run_end]) written_[run_end++] = 0;
      const size_t offset = page << page_shift_;
      const size_t len = (run_end - page) << page_shift_;
      fn(offset, len);
      if (mprotect(reinterpret_cast<void*>(addr_ + offset), len, PROT_READ) != 0) {
        return Fail(DSM_ERR_SYSTEM, "page tracking by mprotect: re-protecting: {}",
                    std::strerror(errno));
      }
      page = run_end;
    }
    return DSM_OK;
  }

 private:
  TrackedRange* slot_;
  uintptr_t addr_;
  size_t bytes_;
  unsigned page_shift_;
  size_t pages_;
  std::unique_ptr<uint8_t[]> written_;
};

}  // namespace

int StartMprotectTracker(void* addr, size_t bytes, size_t page_bytes,
                         std::unique_ptr<PageTracker>* out) {
  if (page_bytes == 0 || (page_bytes & (page_bytes - 1)) != 0 || bytes % page_bytes != 0) {
    return Fail(DSM_ERR_INVALID, "page tracking by mprotect: {} bytes is not a whole number of "
                "{}-byte pages", bytes, page_bytes);
  }
  TrackedRange* slot = nullptr;
  {
    std::lock_guard lock(g_mu);
    if (int rc = InstallHandlerLocked(); rc != DSM_OK) return rc;
    for (size_t i = 0; i < kMaxAreas && !slot; ++i) {
      if (g_ranges[i].reserved) continue;
      slot = &g_ranges[i];
      slot->reserved = true;
      if (i + 1 > g_slots_used.load()) g_slots_used.store(i + 1, std::memory_order_release);
    }
  }
  if (!slot) return Fail(DSM_ERR_NO_SPACE, "page tracking by mprotect: too many tracked areas");
  auto tracker = std::make_unique<MprotectPageTracker>(
      slot, reinterpret_cast<uintptr_t>(addr), bytes,
      static_cast<unsigned>(__builtin_ctzll(page_bytes)));
  if (int rc = tracker->Arm(); rc != DSM_OK) return rc;
  *out = std::move(tracker);
  return DSM_OK;
}

}  // namespace dsm
