// Page tracking by userfaultfd asynchronous write-protect (Linux 6.7+): the
// range is registered in write-protect mode and protected; the kernel resolves
// each first store itself (no signal, no message) and marks the page written;
// PAGEMAP_SCAN with PM_SCAN_WP_MATCHING reports the written pages and protects
// them again in one walk.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "libdsm/errors.h"
#include "libdsm/linux_uapi_compat.h"
#include "libdsm/page_tracker.h"

namespace dsm {

namespace {

constexpr uint64_t kWantedFeatures = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
// Regions per PAGEMAP_SCAN call; a full vector means "call again from walk_end".
constexpr size_t kScanVector = 512;

// A userfaultfd with WP_ASYNC enabled, or -1 with *why set.
int OpenAsyncWpUffd(std::string* why) {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0 && errno == EPERM) {
    // Unprivileged processes may only track user-mode faults, which is all a
    // store from the program is.
    fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  }
  if (fd < 0) {
    *why = std::string("userfaultfd: ") + std::strerror(errno);
    return -1;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kWantedFeatures;
  if (ioctl(fd, UFFDIO_API, &api) != 0 || (api.features & kWantedFeatures) != kWantedFeatures) {
    *why = std::string("the kernel lacks asynchronous write-protect on shared memory "
                       "(UFFD_FEATURE_WP_ASYNC, Linux 6.7+): ") + std::strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

class UffdPageTracker final : public PageTracker {
 public:
  UffdPageTracker(int uffd, int pagemap, uintptr_t addr, size_t bytes)
      : uffd_(uffd), pagemap_(pagemap), addr_(addr), bytes_(bytes) {}
  ~UffdPageTracker() override {
    close(pagemap_);
    close(uffd_);  // ends the registration; the mapping stays writable
  }

  dsm_page_tracker kind() const override { return DSM_PAGE_TRACKER_UFFD; }

  int Collect(const RangeFn& fn) override {
    page_region regions[kScanVector];
    uint64_t start = addr_;
    const uint64_t end = addr_ + bytes_;
    while (start < end) {
      pm_scan_arg arg{};
      arg.size = sizeof(arg);
      arg.flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC;
      arg.start = start;
      arg.end = end;
      arg.vec = reinterpret_cast<uintptr_t>(regions);
      arg.vec_len = kScanVector;
      arg.category_mask = PAGE_IS_WRITTEN;
      arg.return_mask = PAGE_IS_WRITTEN;
      const int n = ioctl(pagemap_, PAGEMAP_SCAN, &arg);
      if (n < 0) {
        return Fail(DSM_ERR_SYSTEM, "PAGEMAP_SCAN of [{:#x}, {:#x}): {}", start, end,
                    std::strerror(errno));
      }
      for (int i = 0; i < n; ++i) fn(regions[i].start - addr_, regions[i].end - regions[i].start);
      // Fewer regions than the vector holds: the walk covered the whole range
      // (walk_end may stop short of `end` even then).
      if (static_cast<size_t>(n) < kScanVector || arg.walk_end <= start) break;
      start = arg.walk_end;
    }
    return DSM_OK;
  }

 private:
  int uffd_;
  int pagemap_;
  uintptr_t addr_;
  size_t bytes_;
};

}  // namespace

std::string UffdUnavailableReason() {
  std::string why;
  const int fd = OpenAsyncWpUffd(&why);
  if (fd >= 0) close(fd);
  return why;
}

int StartUffdTracker(void* addr, size_t bytes, std::unique_ptr<PageTracker>* out) {
  std::string why;
  const int uffd = OpenAsyncWpUffd(&why);
  if (uffd < 0) return Fail(DSM_ERR_SYSTEM, "page tracking by userfaultfd: {}", why);
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uintptr_t>(addr);
  reg.range.len = bytes;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0 ||
      (reg.ioctls & (uint64_t{1} << _UFFDIO_WRITEPROTECT)) == 0) {
    const int e = errno;
    close(uffd);
    return Fail(DSM_ERR_SYSTEM, "page tracking by userfaultfd: cannot register the area in "
                "write-protect mode: {}", std::strerror(e));
  }
  uffdio_writeprotect wp{};
  wp.range = reg.range;
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  if (ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
    const int e = errno;
    close(uffd);
    return Fail(DSM_ERR_SYSTEM, "page tracking by userfaultfd: cannot write-protect the area: {}",
                std::strerror(e));
  }
  const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) {
    const int e = errno;
    close(uffd);
    return Fail(DSM_ERR_SYSTEM, "page tracking by userfaultfd: /proc/self/pagemap: {}",
                std::strerror(e));
  }
  auto tracker = std::make_unique<UffdPageTracker>(uffd, pagemap, reg.range.start, bytes);
  // A kernel with WP_ASYNC but without PAGEMAP_SCAN (6.6) fails here, not later.
  if (int rc = tracker->Collect([](size_t, size_t) {}); rc != DSM_OK) return rc;
  *out = std::move(tracker);
  return DSM_OK;
}

}  // namespace dsm
