// Small helpers the libdsm tests share: publishing while local readers may hold
// the spare buffers, and whether hugetlbfs backing can run here.
#ifndef DSM_TESTS_SUPPORT_DSM_HELPERS_H_
#define DSM_TESTS_SUPPORT_DSM_HELPERS_H_

#include <cstdint>

namespace dsm::testing {

// dsm_publish(area), retried while it returns DSM_ERR_BUSY (up to ~1 s, in
// steps of `pause_us`). Returns the last result.
int PublishRetrying(void* area, uint32_t pause_us = 50);

// Free 2 MiB hugepages, and whether hugetlbfs is mounted on /dev/hugepages.
uint64_t FreeHugepages();
bool HugetlbfsMounted();

}  // namespace dsm::testing

#endif  // DSM_TESTS_SUPPORT_DSM_HELPERS_H_
