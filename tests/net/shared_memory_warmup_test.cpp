// PopulateMappingsNamed: a device's shared mappings are resident after it,
// once each, and a region mapped anew is populated again.
#include "net/shared_memory_warmup.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <vector>

namespace dsm::net {
namespace {

constexpr size_t kBytes = 64 * 4096;

// A shared mapping of a fresh memfd called `name`, as memif maps its regions.
uint8_t* MapRegion(const char* name) {
  const int fd = memfd_create(name, 0);
  if (fd < 0 || ftruncate(fd, kBytes) != 0) return nullptr;
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

size_t ResidentPages(const uint8_t* p) {
  std::vector<unsigned char> in(kBytes / 4096);
  if (mincore(const_cast<uint8_t*>(p), kBytes, in.data()) != 0) return SIZE_MAX;
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(SharedMemoryWarmupTest, PopulatesNamedMappingsOnceEach) {
  uint8_t* region = MapRegion("dsm_warmup_test_region");
  uint8_t* other = MapRegion("dsm_warmup_test_other");
  ASSERT_NE(region, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(ResidentPages(region), 0u) << "a fresh memfd has no pages yet";
  std::set<uintptr_t> done;
  EXPECT_EQ(PopulateMappingsNamed("dsm_warmup_test_region", &done), kBytes);
  EXPECT_EQ(ResidentPages(region), kBytes / 4096);
  EXPECT_EQ(ResidentPages(other), 0u) << "another name is left alone";
  EXPECT_EQ(PopulateMappingsNamed("dsm_warmup_test_region", &done), 0u) << "done already";

  // A region mapped anew (a link that reconnected), even at the same place.
  munmap(region, kBytes);
  uint8_t* again = MapRegion("dsm_warmup_test_region");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(PopulateMappingsNamed("dsm_warmup_test_region", &done), kBytes);
  EXPECT_EQ(ResidentPages(again), kBytes / 4096);
  munmap(again, kBytes);
  munmap(other, kBytes);
}

}  // namespace
}  // namespace dsm::net
