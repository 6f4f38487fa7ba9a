// The same versioned sharing on hugetlbfs backing (2 MiB pages), and a clear
// refusal when hugetlbfs backing is asked for but unavailable.
#include <gtest/gtest.h>
#include <sys/statfs.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"
#include "tests/support/dsm_helpers.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using testing::Reap;
using testing::Shared;
using testing::Spawn;
using testing::FreeHugepages;
using testing::HugetlbfsMounted;

constexpr size_t kAreaBytes = 2u << 20;
constexpr uint64_t kVersions = 100;

struct Board {
  std::atomic<bool> allocated{false};
  std::atomic<bool> reader_done{false};
  uint64_t torn = 0;
  uint64_t final_version = 0;
  uint64_t free_pages_while_running = 0;
};

TEST(Hugetlbfs, AreasOnHugepagesPublishCompleteVersions) {
  if (!HugetlbfsMounted() || FreeHugepages() < 16) {
    GTEST_SKIP() << "needs hugetlbfs on /dev/hugepages with >= 16 free 2 MiB pages "
                    "(run scripts/setup.sh as root)";
  }
  const uint64_t free_before = FreeHugepages();
  testing::DsmdProcess daemon({"--backing", "hugetlbfs", "--region-size", "32M"});
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  Shared<Board> b;
  const pid_t writer = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    void* p = nullptr;
    if (dsm_alloc("huge/area", kAreaBytes, nullptr, &p) != DSM_OK) return 2;
    if (reinterpret_cast<uintptr_t>(p) % kAreaBytes != 0) return 3;  // 2 MiB aligned
    b->allocated = true;
    auto* w = static_cast<uint64_t*>(p);
    for (uint64_t v = 1; v <= kVersions; ++v) {
      for (size_t i = 0; i < kAreaBytes / 8; ++i) w[i] = v;
      dsm_log(p, kAreaBytes);
      while (dsm_publish(p) == DSM_ERR_BUSY) std::this_thread::yield();
    }
    b->free_pages_while_running = FreeHugepages();
    testing::WaitFor([&] { return b->reader_done.load(); }, 20000);
    return dsm_fini();
  });
  ASSERT_TRUE(testing::WaitFor([&] { return b->allocated.load(); }, 10000));
  const pid_t reader = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    const void* p = nullptr;
    if (dsm_attach("huge/area", 5000, &p, nullptr) != DSM_OK) return 2;
    const auto* w = static_cast<const uint64_t*>(p);
    if (dsm_wait_version(p, kVersions, 20000) != DSM_OK) return 3;
    for (size_t i = 0; i < kAreaBytes / 8; ++i) b->torn += w[i] != kVersions;
    b->final_version = dsm_version(p);
    b->reader_done = true;
    return dsm_fini();
  });
  EXPECT_EQ(Reap(reader, 30000), 0);
  EXPECT_EQ(Reap(writer, 30000), 0);
  EXPECT_EQ(b->torn, 0u);
  EXPECT_EQ(b->final_version, kVersions);
  // The copies really live in hugepages: 3 copies of a 2 MiB area in use.
  EXPECT_LE(b->free_pages_while_running + 3, free_before);
}

TEST(Hugetlbfs, AskingForItWhereItIsMissingFailsClearly) {
  const std::string cmd = testing::DsmdBinary() +
                          " --backing hugetlbfs --hugetlbfs-dir /tmp --socket /tmp/dsm-hugetlbfs-"
                          "missing.sock 2>&1";
  FILE* out = popen(cmd.c_str(), "r");
  ASSERT_NE(out, nullptr);
  std::string text;
  char buf[512];
  while (fgets(buf, sizeof(buf), out)) text += buf;
  EXPECT_NE(pclose(out), 0);
  EXPECT_NE(text.find("not a hugetlbfs mount"), std::string::npos) << text;
}

}  // namespace
}  // namespace dsm
