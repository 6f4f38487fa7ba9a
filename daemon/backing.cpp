#include "daemon/backing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "coherence/constants.h"

namespace dsm {

namespace {

// hugetlbfs backing is sized in 2 MiB pages.
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr uint32_t kHugetlbfsMagic = 0x958458f6;

uint64_t FreeHugepages() {
  std::ifstream in("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
  uint64_t n = 0;
  in >> n;
  return n;
}

bool IsHugetlbfs(const std::string& dir) {
  struct statfs st {};
  return statfs(dir.c_str(), &st) == 0 && static_cast<uint32_t>(st.f_type) == kHugetlbfsMagic;
}

Backing TryHugetlbfs(uint64_t bytes, const std::string& dir, std::string* why) {
  Backing b;
  if (!IsHugetlbfs(dir)) {
    *why = dir + " is not a hugetlbfs mount (mount -t hugetlbfs nodev " + dir + ")";
    return b;
  }
  const uint64_t pages = (bytes + kHugePageBytes - 1) / kHugePageBytes;
  const uint64_t free_pages = FreeHugepages();
  if (free_pages < pages) {
    *why = "need " + std::to_string(pages) + " free 2 MiB hugepages, have " +
           std::to_string(free_pages) + " (echo N > /proc/sys/vm/nr_hugepages)";
    return b;
  }
  std::string path = dir + "/dsmd-backing-XXXXXX";
  const int fd = mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) {
    *why = "cannot create a file in " + dir + ": " + std::strerror(errno);
    return b;
  }
  unlink(path.c_str());
  if (ftruncate(fd, static_cast<off_t>(pages * kHugePageBytes)) != 0) {
    *why = std::string("ftruncate on hugetlbfs failed: ") + std::strerror(errno);
    close(fd);
    return b;
  }
  b.fd = fd;
  b.kind = BackingKind::kHugetlbfs;
  b.bytes = pages * kHugePageBytes;
  b.page_bytes = kHugePageBytes;
  b.description = "hugetlbfs (" + std::to_string(pages) + " x 2 MiB pages in " + dir + ")";
  return b;
}

Backing TryMemfd(uint64_t bytes, std::string* why) {
  Backing b;
  const int fd = memfd_create("dsmd-backing", MFD_CLOEXEC);
  if (fd < 0) {
    *why = std::string("memfd_create failed: ") + std::strerror(errno);
    return b;
  }
  const uint64_t rounded = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    *why = std::string("ftruncate on memfd failed: ") + std::strerror(errno);
    close(fd);
    return b;
  }
  b.fd = fd;
  b.kind = BackingKind::kMemfd;
  b.bytes = rounded;
  b.page_bytes = kPageBytes;
  b.description = "memfd (4 KiB pages, allocated on first touch)";
  return b;
}

}  // namespace

Backing CreateBacking(BackingChoice choice, uint64_t bytes, const std::string& hugetlbfs_dir,
                      std::string* error) {
  std::string why;
  if (choice == BackingChoice::kHugetlbfs || choice == BackingChoice::kAuto) {
    Backing b = TryHugetlbfs(bytes, hugetlbfs_dir, &why);
    if (b.fd >= 0) return b;
    if (choice == BackingChoice::kHugetlbfs) {
      *error = "hugetlbfs backing unavailable: " + why;
      return b;
    }
  }
  std::string memfd_why;
  Backing b = TryMemfd(bytes, &memfd_why);
  if (b.fd < 0) {
    *error = memfd_why;
  } else if (!why.empty()) {
    b.description += "; hugepages not used: " + why;
  }
  return b;
}

void ReleaseBackingMemory(const Backing& backing, uint64_t offset, uint64_t bytes) {
  if (backing.fd < 0 || bytes == 0) return;
  // Best effort: if the kernel refuses, the pages are simply reused later.
  (void)fallocate(backing.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(offset), static_cast<off_t>(bytes));
}

}  // namespace dsm
