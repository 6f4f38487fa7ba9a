// The C++ layer (include/dsm/dsm.hpp): RAII session, typed handles, element
// access that logs on write, statuses that carry the library's message.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "dsm/dsm.hpp"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using namespace std::chrono_literals;
using testing::Reap;
using testing::Shared;
using testing::Spawn;

struct Board {
  std::atomic<bool> published{false};
  std::atomic<bool> done{false};
  float seen[4] = {};
  size_t size = 0;
  uint64_t version = 0;
  int unknown_code = 0;
  bool unknown_has_message = false;
};

TEST(CppApi, TypedHandlesShareLoggedElementsAcrossProcesses) {
  testing::DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  Shared<Board> b;
  const std::string socket = daemon.socket_path();
  const pid_t writer = Spawn([&] {
    dsm::Session s(socket);
    if (!s) return 1;
    auto w = dsm::alloc<float>("cpp/w", 1000);
    if (!w || w.size() != 1000) return 2;
    w[0] = 1.5f;    // logged store
    w[999] = 2.5f;  // the last element
    w[7] += 4.0f;   // read-modify-write through the reference
    w.data()[500] = 3.5f;  // raw store, logged explicitly
    if (!w.log(500, 1).ok()) return 3;
    uint64_t v = 0;
    if (!w.publish().ok() || !w.version(&v).ok() || v != 1) return 4;
    // A second handle to the same name fails with the library's message.
    auto again = dsm::alloc<float>("cpp/w", 10);
    if (again || again.creation_status().code() != DSM_ERR_EXISTS ||
        again.creation_status().message().find("cpp/w") == std::string::npos) {
      return 5;
    }
    // It holds no area, and its calls say so rather than report a version.
    v = 7;
    const dsm::Status vs = again.version(&v);
    if (vs.code() != DSM_ERR_INVALID || v != 7 ||
        vs.message().find("holds no area") == std::string::npos) {
      return 6;
    }
    b->published = true;
    testing::WaitFor([&] { return b->done.load(); }, 20000);
    return 0;
  });
  ASSERT_TRUE(testing::WaitFor([&] { return b->published.load(); }, 10000));
  const pid_t reader = Spawn([&] {
    dsm::Session s(socket);
    if (!s) return 1;
    auto r = dsm::attach<float>("cpp/w", 5000ms);
    if (!r) return 2;
    if (!r.wait_version(1, 5000ms).ok()) return 3;
    b->seen[0] = r[0];
    b->seen[1] = r[999];
    b->seen[2] = r[7];
    b->seen[3] = r[500];
    b->size = r.size();
    if (!r.version(&b->version).ok()) return 4;
    auto missing = dsm::attach<float>("cpp/none", 50ms);
    b->unknown_code = missing.creation_status().code();
    b->unknown_has_message = !missing.creation_status().message().empty();
    b->done = true;
    return 0;
  });
  EXPECT_EQ(Reap(reader, 30000), 0);
  b->done = true;
  EXPECT_EQ(Reap(writer, 30000), 0);
  EXPECT_EQ(b->seen[0], 1.5f);
  EXPECT_EQ(b->seen[1], 2.5f);
  EXPECT_EQ(b->seen[2], 4.0f);
  EXPECT_EQ(b->seen[3], 3.5f);
  EXPECT_EQ(b->size, 1000u);
  EXPECT_EQ(b->version, 1u);
  EXPECT_EQ(b->unknown_code, DSM_ERR_TIMEOUT);
  EXPECT_TRUE(b->unknown_has_message);
}

TEST(CppApi, ManagedAreasAreAllocatedAndReportTheirBudget) {
  testing::DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  const std::string socket = daemon.socket_path();
  const pid_t writer = Spawn([&] {
    dsm::Session s(socket);
    if (!s) return 1;
    dsm_managed_opts m{};
    m.budget_bytes_per_s = 1'000'000;
    m.max_line_age = 3;
    auto w = dsm::alloc_managed<float>("cpp/managed", 4096, m);
    if (!w || w.size() != 4096) return 2;
    w[10] = 1.0f;
    if (!w.publish().ok()) return 3;
    dsm_managed_status st{};
    if (!w.managed_status(&st).ok() || !st.managed || st.budget_bytes_per_s != 1'000'000 ||
        st.max_line_age != 3) {
      return 4;
    }
    // No budget: refused with the library's message, no area.
    m.budget_bytes_per_s = 0;
    auto bad = dsm::alloc_managed<float>("cpp/bad", 16, m);
    if (bad || bad.creation_status().code() != DSM_ERR_INVALID ||
        bad.creation_status().message().find("budget_bytes_per_s") == std::string::npos) {
      return 5;
    }
    if (bad.managed_status(&st).code() != DSM_ERR_INVALID) return 6;
    return 0;
  });
  EXPECT_EQ(Reap(writer, 30000), 0);
}

TEST(CppApi, ASessionWithoutDaemonSaysSo) {
  dsm::Session s(std::string("/tmp/dsm-no-daemon-here.sock"));
  EXPECT_FALSE(s);
  EXPECT_EQ(s.status().code(), DSM_ERR_NO_DAEMON);
  EXPECT_NE(s.status().ToString().find("dsmd"), std::string::npos);
}

}  // namespace
}  // namespace dsm
