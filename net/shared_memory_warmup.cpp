#include "net/shared_memory_warmup.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace dsm::net {

size_t PopulateMappingsNamed(std::string_view name_part, std::set<uintptr_t>* done) {
  std::ifstream maps("/proc/self/maps");
  size_t bytes = 0;
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name_part) == std::string::npos) continue;
    unsigned long start = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {}, dev[16] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %15s %lu", &start, &end, perms, &offset, dev,
                    &inode) != 6 ||
        end <= start) {
      continue;
    }
    // A memfd's inode is its own: a region mapped anew (a reconnection)
    // is populated even where an old one was.
    if (!done->insert(inode ^ (uint64_t{start} << 1)).second) continue;
    // Populating does not change the contents: the peer may be using the
    // memory already.
    const int advice = perms[1] == 'w' ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    if (madvise(reinterpret_cast<void*>(start), end - start, advice) == 0) bytes += end - start;
  }
  return bytes;
}

}  // namespace dsm::net
