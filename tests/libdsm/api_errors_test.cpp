// Wrong use of the API and bad input: each gets a clear error code and message,
// and nothing already shared is corrupted.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "dsm/dsm.h"
#include "dsm/dsm.hpp"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using testing::DsmdProcess;
using testing::Reap;
using testing::Shared;
using testing::Spawn;

std::string LastError() { return dsm_last_error(); }

TEST(NoSession, CallsBeforeInitSayWhatToDo) {
  int x = 0;
  EXPECT_EQ(dsm_service(), DSM_ERR_NOT_INIT);
  EXPECT_EQ(dsm_log(&x, sizeof(x)), DSM_ERR_NOT_INIT);
  EXPECT_NE(LastError().find("dsm_init"), std::string::npos);
  void* p = nullptr;
  EXPECT_EQ(dsm_alloc("a", 64, nullptr, &p), DSM_ERR_NOT_INIT);
  EXPECT_EQ(dsm_fini(), DSM_ERR_NOT_INIT);
}

TEST(NoSession, InitWithoutDaemonExplainsHowToStartOne) {
  dsm_init_opts opts{};
  opts.socket_path = "/tmp/dsm-no-such-dir/dsmd.sock";
  EXPECT_EQ(dsm_init(&opts), DSM_ERR_NO_DAEMON);
  EXPECT_NE(LastError().find("/tmp/dsm-no-such-dir/dsmd.sock"), std::string::npos);
  EXPECT_NE(LastError().find("dsmd --background"), std::string::npos);
  EXPECT_EQ(dsm_service(), DSM_ERR_NOT_INIT);  // nothing half-initialized
}

class WithSession : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { daemon_ = new DsmdProcess({"--region-size", "64M"}); }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(daemon_->ok());
    dsm_init_opts opts{};
    opts.socket_path = daemon_->socket_path().c_str();
    ASSERT_EQ(dsm_init(&opts), DSM_OK) << LastError();
  }
  void TearDown() override { EXPECT_EQ(dsm_fini(), DSM_OK); }

  static DsmdProcess* daemon_;
};
DsmdProcess* WithSession::daemon_ = nullptr;

TEST_F(WithSession, InitTwiceIsRefused) {
  dsm_init_opts opts{};
  opts.socket_path = daemon_->socket_path().c_str();
  EXPECT_EQ(dsm_init(&opts), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("already initialized"), std::string::npos);
}

TEST_F(WithSession, AttachingAnUnknownNameTimesOut) {
  const void* p = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(dsm_attach("errors/never-allocated", 150, &p, nullptr), DSM_ERR_TIMEOUT);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(LastError().find("errors/never-allocated"), std::string::npos);
}

TEST_F(WithSession, AllocatingAnExistingNameFailsAndKeepsTheFirst) {
  void* first = nullptr;
  ASSERT_EQ(dsm_alloc("errors/dup", 8192, nullptr, &first), DSM_OK);
  std::memset(first, 0x5a, 8192);
  void* second = nullptr;
  EXPECT_EQ(dsm_alloc("errors/dup", 8192, nullptr, &second), DSM_ERR_EXISTS);
  EXPECT_NE(LastError().find("already exists"), std::string::npos);
  EXPECT_EQ(second, nullptr);
  for (size_t i = 0; i < 8192; ++i) ASSERT_EQ(static_cast<uint8_t*>(first)[i], 0x5a);
  EXPECT_EQ(dsm_free(first), DSM_OK);
}

TEST_F(WithSession, ZeroAndAbsurdSizesAreRejected) {
  void* p = nullptr;
  EXPECT_EQ(dsm_alloc("errors/zero", 0, nullptr, &p), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("size is 0"), std::string::npos);
  EXPECT_EQ(dsm_alloc("errors/huge", size_t{1} << 60, nullptr, &p), DSM_ERR_NO_SPACE);
  EXPECT_EQ(dsm_alloc("errors/max", SIZE_MAX, nullptr, &p), DSM_ERR_NO_SPACE);
  EXPECT_EQ(dsm_alloc("errors/too-big-for-backing", size_t{60} << 20, nullptr, &p),
            DSM_ERR_NO_SPACE);
  EXPECT_NE(LastError().find("--region-size"), std::string::npos);
  EXPECT_EQ(p, nullptr);
}

TEST_F(WithSession, BadNamesAndOptionsAreRejected) {
  void* p = nullptr;
  EXPECT_EQ(dsm_alloc("", 64, nullptr, &p), DSM_ERR_INVALID);
  EXPECT_EQ(dsm_alloc(std::string(100, 'n').c_str(), 64, nullptr, &p), DSM_ERR_INVALID);
  EXPECT_EQ(dsm_alloc("has space", 64, nullptr, &p), DSM_ERR_INVALID);
  EXPECT_EQ(dsm_alloc(nullptr, 64, nullptr, &p), DSM_ERR_INVALID);
  dsm_alloc_opts opts{};
  opts.reader_buffers = 9;
  EXPECT_EQ(dsm_alloc("errors/buffers", 64, &opts, &p), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("reader_buffers"), std::string::npos);
}

TEST_F(WithSession, BadManagedOptionsAreRejectedWithWhatToGive) {
  void* p = nullptr;
  EXPECT_EQ(dsm_alloc_managed("errors/managed", 4096, nullptr, nullptr, &p), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("use dsm_alloc"), std::string::npos) << LastError();
  dsm_managed_opts m{};
  EXPECT_EQ(dsm_alloc_managed("errors/managed", 4096, nullptr, &m, &p), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("budget_bytes_per_s is 0"), std::string::npos) << LastError();
  m.budget_bytes_per_s = 1 << 20;
  m.element = 7;
  EXPECT_EQ(dsm_alloc_managed("errors/managed", 4096, nullptr, &m, &p), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("DSM_ELEMENT_FLOAT32_ABSOLUTE"), std::string::npos) << LastError();
  EXPECT_EQ(p, nullptr);
  m.element = DSM_ELEMENT_FLOAT32_ABSOLUTE;  // ranked by absolute change: accepted
  ASSERT_EQ(dsm_alloc_managed("errors/managed-absolute", 4096, nullptr, &m, &p), DSM_OK)
      << LastError();
  ASSERT_EQ(dsm_free(p), DSM_OK);
  p = nullptr;
  // Good options: a managed area; a plain one says it is not.
  m.element = 0;
  m.max_line_age = 5;
  ASSERT_EQ(dsm_alloc_managed("errors/managed", 4096, nullptr, &m, &p), DSM_OK) << LastError();
  dsm_managed_status st{};
  ASSERT_EQ(dsm_status_managed(p, &st), DSM_OK);
  EXPECT_EQ(st.managed, 1);
  EXPECT_EQ(st.budget_bytes_per_s, uint64_t{1} << 20);
  EXPECT_EQ(st.max_line_age, 5u);
  EXPECT_EQ(st.residual_lines, 0u) << "no other host reads it";
  void* plain = nullptr;
  ASSERT_EQ(dsm_alloc("errors/plain", 4096, nullptr, &plain), DSM_OK);
  ASSERT_EQ(dsm_status_managed(plain, &st), DSM_OK);
  EXPECT_EQ(st.managed, 0);
  EXPECT_EQ(dsm_status_managed(plain, nullptr), DSM_ERR_INVALID);
  int on_stack = 0;
  EXPECT_EQ(dsm_status_managed(&on_stack, &st), DSM_ERR_INVALID);
  EXPECT_EQ(dsm_free(p), DSM_OK);
  EXPECT_EQ(dsm_free(plain), DSM_OK);
}

TEST_F(WithSession, AFullRegionSaysSoAndKeepsWhatIsThere) {
  // 64 MiB of backing; a 4 MiB area takes 3 copies (writer + 2 reader buffers).
  constexpr size_t kArea = 4u << 20;
  std::vector<void*> areas;
  int rc = DSM_OK;
  for (int i = 0; i < 100 && rc == DSM_OK; ++i) {
    void* p = nullptr;
    rc = dsm_alloc(("errors/fill-" + std::to_string(i)).c_str(), kArea, nullptr, &p);
    if (rc == DSM_OK) {
      std::memset(p, i + 1, kArea);
      ASSERT_EQ(dsm_log(p, kArea), DSM_OK);
      ASSERT_EQ(dsm_publish(p), DSM_OK);
      areas.push_back(p);
    }
  }
  EXPECT_EQ(rc, DSM_ERR_NO_SPACE);
  EXPECT_EQ(areas.size(), 5u);
  EXPECT_NE(LastError().find("backing memory is full"), std::string::npos);
  for (size_t i = 0; i < areas.size(); ++i) {
    const auto* bytes = static_cast<const uint8_t*>(areas[i]);
    for (size_t j = 0; j < kArea; j += 4096) ASSERT_EQ(bytes[j], i + 1);
  }
  // Freeing one makes room again.
  ASSERT_EQ(dsm_free(areas.back()), DSM_OK);
  areas.pop_back();
  void* again = nullptr;
  EXPECT_EQ(dsm_alloc("errors/fill-again", kArea, nullptr, &again), DSM_OK);
  areas.push_back(again);
  for (void* p : areas) EXPECT_EQ(dsm_free(p), DSM_OK);
}

TEST_F(WithSession, FreeingTwiceIsAnError) {
  void* p = nullptr;
  ASSERT_EQ(dsm_alloc("errors/free-twice", 4096, nullptr, &p), DSM_OK);
  EXPECT_EQ(dsm_free(p), DSM_OK);
  EXPECT_EQ(dsm_free(p), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("already freed"), std::string::npos);
  EXPECT_EQ(dsm_free(nullptr), DSM_ERR_INVALID);
  // The name is free again.
  EXPECT_EQ(dsm_alloc("errors/free-twice", 4096, nullptr, &p), DSM_OK);
  EXPECT_EQ(dsm_free(p), DSM_OK);
}

TEST_F(WithSession, LoggingOutsideOwnAreasIsAnError) {
  void* p = nullptr;
  ASSERT_EQ(dsm_alloc("errors/log", 4096, nullptr, &p), DSM_OK);
  int on_stack = 0;
  EXPECT_EQ(dsm_log(&on_stack, sizeof(on_stack)), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("not inside an area this process writes"), std::string::npos);
  auto* bytes = static_cast<uint8_t*>(p);
  EXPECT_EQ(dsm_log(bytes + 4096, 1), DSM_ERR_INVALID);   // one past the end
  EXPECT_EQ(dsm_log(bytes + 4000, 200), DSM_ERR_INVALID);  // runs past the end
  EXPECT_NE(LastError().find("past the end"), std::string::npos);
  EXPECT_EQ(dsm_log(nullptr, 8), DSM_ERR_INVALID);
  EXPECT_EQ(dsm_log(bytes + 4032, 64), DSM_OK);  // the last line is fine
  EXPECT_EQ(dsm_free(p), DSM_OK);
  EXPECT_EQ(dsm_log(bytes, 8), DSM_ERR_INVALID);  // freed: the log cache must not accept it
}

TEST_F(WithSession, OtherCallsCheckTheirArea) {
  int on_stack = 0;
  EXPECT_EQ(dsm_publish(&on_stack), DSM_ERR_INVALID);
  EXPECT_EQ(dsm_wait_version(&on_stack, 1, 10), DSM_ERR_INVALID);
  dsm_area_status st{};
  EXPECT_EQ(dsm_status(&on_stack, &st), DSM_ERR_INVALID);
}

TEST_F(WithSession, AVersionOfABadPointerIsAnErrorNotAVersion) {
  int on_stack = 0;
  uint64_t v = 42;
  EXPECT_EQ(dsm_get_version(&on_stack, &v), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("dsm_get_version"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("not in an area of this process"), std::string::npos);
  EXPECT_EQ(v, 42u);
  EXPECT_EQ(dsm_get_version(nullptr, &v), DSM_ERR_INVALID);
  EXPECT_EQ(v, 42u);

  void* p = nullptr;
  ASSERT_EQ(dsm_alloc("errors/version", 4096, nullptr, &p), DSM_OK);
  EXPECT_EQ(dsm_get_version(p, nullptr), DSM_ERR_INVALID);
  EXPECT_NE(LastError().find("NULL"), std::string::npos) << LastError();
  ASSERT_EQ(dsm_get_version(p, &v), DSM_OK);
  EXPECT_EQ(v, 0u);  // a real version 0: nothing published yet
  static_cast<uint8_t*>(p)[100] = 1;
  ASSERT_EQ(dsm_log(static_cast<uint8_t*>(p) + 100, 1), DSM_OK);
  ASSERT_EQ(dsm_publish(p), DSM_OK);
  ASSERT_EQ(dsm_get_version(static_cast<uint8_t*>(p) + 4095, &v), DSM_OK);  // any byte of it
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(dsm_version(p), 1u);
  ASSERT_EQ(dsm_free(p), DSM_OK);
  v = 42;
  EXPECT_EQ(dsm_get_version(p, &v), DSM_ERR_INVALID);  // freed
  EXPECT_EQ(v, 42u);
  // The unchecked form returns 0 and says why.
  EXPECT_EQ(dsm_version(p), 0u);
  EXPECT_NE(LastError().find("dsm_version"), std::string::npos) << LastError();
}

TEST_F(WithSession, AFailedCallsMessageOutlivesLaterSuccesses) {
  EXPECT_EQ(dsm_free(nullptr), DSM_ERR_INVALID);
  const std::string failed = LastError();
  EXPECT_NE(failed.find("dsm_free"), std::string::npos);
  void* p = nullptr;
  ASSERT_EQ(dsm_alloc("errors/outlives", 4096, nullptr, &p), DSM_OK);
  ASSERT_EQ(dsm_log(p, 1), DSM_OK);
  EXPECT_EQ(dsm_publish(p), DSM_OK);
  EXPECT_EQ(dsm_service(), DSM_OK);
  EXPECT_EQ(dsm_version(p), 1u);
  EXPECT_EQ(dsm_free(p), DSM_OK);
  EXPECT_EQ(LastError(), failed);
}

TEST(Readers, AStoreToAReaderMappingFaults) {
  DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  daemon.ExportSocket();
  struct Flags {
    std::atomic<bool> allocated{false};
    std::atomic<bool> done{false};
  };
  Shared<Flags> flags;
  const pid_t writer = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    void* p = nullptr;
    if (dsm_alloc("readers/ro", 4096, nullptr, &p) != DSM_OK) return 2;
    flags->allocated = true;
    testing::WaitFor([&] { return flags->done.load(); }, 20000);
    return dsm_fini() == DSM_OK ? 0 : 3;
  });
  ASSERT_TRUE(testing::WaitFor([&] { return flags->allocated.load(); }, 10000));
  const pid_t reader = Spawn([&] {
    if (dsm_init(nullptr) != DSM_OK) return 1;
    const void* p = nullptr;
    if (dsm_attach("readers/ro", 5000, &p, nullptr) != DSM_OK) return 2;
    volatile uint8_t first = *static_cast<const uint8_t*>(p);  // reading is fine
    (void)first;
    *const_cast<volatile uint8_t*>(static_cast<const uint8_t*>(p)) = 1;  // must fault
    return 0;
  });
  EXPECT_EQ(Reap(reader, 20000), -SIGSEGV);
  flags->done = true;
  EXPECT_EQ(Reap(writer, 20000), 0);
}

TEST(Daemon, ASecondDaemonOnTheSameSocketRefusesToStart) {
  DsmdProcess daemon;
  ASSERT_TRUE(daemon.ok());
  const std::string cmd = testing::DsmdBinary() + " --backing memfd --socket " +
                          daemon.socket_path() + " 2>&1";
  FILE* out = popen(cmd.c_str(), "r");
  ASSERT_NE(out, nullptr);
  std::string text;
  char buf[512];
  while (fgets(buf, sizeof(buf), out)) text += buf;
  const int status = pclose(out);
  EXPECT_NE(status, 0);
  EXPECT_NE(text.find("already serving"), std::string::npos) << text;
  EXPECT_TRUE(std::filesystem::exists(daemon.socket_path()));  // the first one is untouched
}

TEST(Daemon, StoppingTellsClientsAndRemovesTheSocket) {
  auto daemon = std::make_unique<DsmdProcess>();
  ASSERT_TRUE(daemon->ok());
  dsm_init_opts opts{};
  const std::string path = daemon->socket_path();
  opts.socket_path = path.c_str();
  ASSERT_EQ(dsm_init(&opts), DSM_OK);
  void* p = nullptr;
  ASSERT_EQ(dsm_alloc("daemon/before-stop", 4096, nullptr, &p), DSM_OK);
  static_cast<uint8_t*>(p)[0] = 7;
  EXPECT_EQ(daemon->Stop(), 0);  // exit code 0 after SIGTERM
  EXPECT_FALSE(std::filesystem::exists(path));
  void* q = nullptr;
  EXPECT_EQ(dsm_alloc("daemon/after-stop", 4096, nullptr, &q), DSM_ERR_DAEMON_GONE);
  EXPECT_EQ(static_cast<uint8_t*>(p)[0], 7);  // shared memory stays usable
  EXPECT_EQ(dsm_fini(), DSM_OK);
}

}  // namespace
}  // namespace dsm
