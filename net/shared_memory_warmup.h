// Pre-faults the shared memory a device driver mapped for its rings and
// buffers, so that frames do not pay first-touch page faults.
//
// net_memif maps its regions (memfd "memif_region_N") when a link connects,
// in both processes. Each slot of a ring is a whole buffer (9 KiB at MTU
// 9000), so until a ring wraps every frame lands on pages nobody touched yet:
// a page fault in the sender and another in the receiver, 10-20 us each on
// this machine's VM. A ring of 4,096 slots that carries one ACK per version
// wraps only after 4,096 versions. Populating the mappings once, when the
// link comes up, takes that cost out of the frames' path.
#ifndef DSM_NET_SHARED_MEMORY_WARMUP_H_
#define DSM_NET_SHARED_MEMORY_WARMUP_H_

#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

namespace dsm::net {

// Populates (MADV_POPULATE_WRITE, or _READ for a read-only mapping) every
// mapping of this process whose name contains `name_part` and that is not in
// `*done` (by inode and start), then adds it there. Returns the bytes populated. Best
// effort: a kernel without the advice, or a mapping gone meanwhile, is
// skipped; the frames then fault as before.
size_t PopulateMappingsNamed(std::string_view name_part, std::set<uintptr_t>* done);

}  // namespace dsm::net

#endif  // DSM_NET_SHARED_MEMORY_WARMUP_H_
