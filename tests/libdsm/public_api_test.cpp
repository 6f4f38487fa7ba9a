// What the public API promises without a daemon: a failed call leaves its own
// message (never an earlier call's), a dsm::Status keeps the message it was
// made with, a version query reports errors apart from versions, and AUTO is a
// page tracker value of its own.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "dsm/dsm.h"
#include "dsm/dsm.hpp"

namespace dsm {
namespace {

constexpr const char* kNoDaemon = "/tmp/dsm-public-api-test-no-daemon/dsmd.sock";

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Leaves the thread's last error naming kNoDaemon.
void FailInit() {
  dsm_init_opts opts{};
  opts.socket_path = kNoDaemon;
  ASSERT_EQ(dsm_init(&opts), DSM_ERR_NO_DAEMON);
  ASSERT_TRUE(Has(dsm_last_error(), kNoDaemon)) << dsm_last_error();
}

TEST(LastError, EachFailedCallLeavesItsOwnMessage) {
  FailInit();
  int x = 0;
  uint64_t v = 42;
  EXPECT_EQ(dsm_get_version(&x, &v), DSM_ERR_NOT_INIT);
  EXPECT_TRUE(Has(dsm_last_error(), "dsm_get_version: call dsm_init() first")) << dsm_last_error();
  EXPECT_EQ(v, 42u);  // written only on success
  FailInit();
  EXPECT_EQ(dsm_version(&x), 0u);
  EXPECT_TRUE(Has(dsm_last_error(), "dsm_version: call dsm_init() first")) << dsm_last_error();
  FailInit();
  dsm_area_status st{};
  EXPECT_EQ(dsm_status(&x, &st), DSM_ERR_NOT_INIT);
  EXPECT_FALSE(Has(dsm_last_error(), kNoDaemon)) << dsm_last_error();
}

TEST(CppStatus, AFailureFoundInTheWrapperCarriesItsOwnMessage) {
  FailInit();
  auto huge = dsm::alloc<double>("api/huge", SIZE_MAX);
  EXPECT_FALSE(huge);
  EXPECT_EQ(huge.creation_status().code(), DSM_ERR_INVALID);
  const std::string& message = huge.creation_status().message();
  EXPECT_TRUE(Has(message, "overflow")) << message;
  EXPECT_FALSE(Has(message, kNoDaemon));
}

TEST(CppStatus, KeepsTheMessageItWasMadeWith) {
  const Status service(dsm_service());
  EXPECT_EQ(service.code(), DSM_ERR_NOT_INIT);
  EXPECT_EQ(service.message(), "dsm_service: call dsm_init() first");
  FailInit();
  EXPECT_EQ(service.message(), "dsm_service: call dsm_init() first");
  EXPECT_EQ(service.ToString(),
            "dsm_init() has not been called: dsm_service: call dsm_init() first");
  const Status explicit_message(DSM_ERR_INVALID, "what went wrong");
  EXPECT_EQ(explicit_message.message(), "what went wrong");
  EXPECT_TRUE(Status().ok());
  EXPECT_TRUE(Status(DSM_OK).message().empty());
}

TEST(CppHandle, AHandleWithoutAnAreaHasNoVersion) {
  dsm::Readable<float> empty;
  uint64_t v = 42;
  const Status s = empty.version(&v);
  EXPECT_EQ(s.code(), DSM_ERR_INVALID);
  EXPECT_TRUE(Has(s.message(), "holds no area")) << s.message();
  EXPECT_EQ(v, 42u);
  dsm_area_status st{};
  EXPECT_EQ(empty.area_status(&st).code(), DSM_ERR_INVALID);

  auto failed = dsm::alloc<double>("api/huge", SIZE_MAX);
  const Status f = failed.version(&v);
  EXPECT_EQ(f.code(), DSM_ERR_INVALID);
  EXPECT_TRUE(Has(f.message(), "overflow")) << f.message();  // says why it has none
  EXPECT_EQ(failed.publish().code(), DSM_ERR_INVALID);
}

TEST(PageTracker, AutoIsItsOwnValue) {
  static_assert(DSM_PAGE_TRACKER_AUTO != DSM_PAGE_TRACKER_NONE);
  static_assert(DSM_PAGE_TRACKER_AUTO != DSM_PAGE_TRACKER_UFFD);
  static_assert(DSM_PAGE_TRACKER_AUTO != DSM_PAGE_TRACKER_MPROTECT);
  EXPECT_STREQ(dsm_page_tracker_name(DSM_PAGE_TRACKER_AUTO), "auto");
  EXPECT_STREQ(dsm_page_tracker_name(DSM_PAGE_TRACKER_NONE), "none");
  EXPECT_STREQ(dsm_page_tracker_name(DSM_PAGE_TRACKER_UFFD), "uffd-wp-async");
  EXPECT_STREQ(dsm_page_tracker_name(DSM_PAGE_TRACKER_MPROTECT), "mprotect");
  EXPECT_STREQ(dsm_page_tracker_name(-1), "unknown");
  EXPECT_STREQ(dsm_page_tracker_name(99), "unknown");
}

}  // namespace
}  // namespace dsm
