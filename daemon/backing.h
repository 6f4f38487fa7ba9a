// The host's backing memory for all area copies: a hugetlbfs file when enough
// hugepages are free, a memfd otherwise. The file is unlinked at once, so it
// disappears with the last descriptor even if dsmd is killed.
#ifndef DSM_DAEMON_BACKING_H_
#define DSM_DAEMON_BACKING_H_

#include <cstdint>
#include <string>

#include "libdsm/contract/shm_layout.h"

namespace dsm {

enum class BackingChoice { kAuto, kMemfd, kHugetlbfs };

struct Backing {
  int fd = -1;
  BackingKind kind = BackingKind::kMemfd;
  uint64_t bytes = 0;
  uint64_t page_bytes = 0;
  std::string description;  // for the log: what was chosen and why
};

// Creates `bytes` of backing. On failure returns fd -1 and `error` says why and
// how to fix it.
Backing CreateBacking(BackingChoice choice, uint64_t bytes, const std::string& hugetlbfs_dir,
                      std::string* error);

// Gives the memory of [offset, offset + bytes) back to the kernel (contents
// become zero).
void ReleaseBackingMemory(const Backing& backing, uint64_t offset, uint64_t bytes);

}  // namespace dsm

#endif  // DSM_DAEMON_BACKING_H_
