#include "tests/support/dsm_helpers.h"

#include <sys/statfs.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "dsm/dsm.h"

namespace dsm::testing {

int PublishRetrying(void* area, uint32_t pause_us) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int rc;
  while ((rc = dsm_publish(area)) == DSM_ERR_BUSY && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  return rc;
}

uint64_t FreeHugepages() {
  std::ifstream in("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
  uint64_t n = 0;
  in >> n;
  return n;
}

bool HugetlbfsMounted() {
  constexpr uint32_t kHugetlbfsMagic = 0x958458f6;
  struct statfs st {};
  return statfs("/dev/hugepages", &st) == 0 && static_cast<uint32_t>(st.f_type) == kHugetlbfsMagic;
}

}  // namespace dsm::testing
