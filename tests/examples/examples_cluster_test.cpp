// The examples across a 3-host virtual cluster (root: network namespaces), one
// process per host; the 1-worker baseline of matrix factorization runs on host 1.
#include <gtest/gtest.h>

#include <memory>

#include "tests/examples/example_scenarios.h"

namespace dsm::testing {
namespace {

constexpr int kHosts = 3;

// One cluster for the whole file: bringing it up costs more than a test.
class ExamplesAcrossHosts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (MultihostUnavailableReason().empty()) cluster_ = std::make_unique<VirtualCluster>(kHosts);
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override {
    if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(cluster_ && cluster_->ok());
    runner_ = std::make_unique<ExampleRunner>(cluster_.get());
  }
  static std::unique_ptr<VirtualCluster> cluster_;
  std::unique_ptr<ExampleRunner> runner_;
  const HostOf one_per_host_ = [](int k) { return 1 + k % kHosts; };
};

std::unique_ptr<VirtualCluster> ExamplesAcrossHosts::cluster_;

TEST_F(ExamplesAcrossHosts, MatrixFactorizationThreeHostsMatchOne) {
  ExpectMatrixFactorizationMatchesOneWorker(*runner_, kHosts, one_per_host_);
}

TEST_F(ExamplesAcrossHosts, BarrierAcrossThreeHosts) {
  ExpectBarrierCompletes(*runner_, kHosts, one_per_host_);
}

TEST_F(ExamplesAcrossHosts, HashTableBuiltOnOneHostLookedUpOnTheOthers) {
  ExpectHashTableFoundByReaders(*runner_, kHosts - 1, one_per_host_);
}

}  // namespace
}  // namespace dsm::testing
