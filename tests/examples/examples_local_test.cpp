// The examples with several processes on one host: a private dsmd, no root.
#include <gtest/gtest.h>

#include "tests/examples/example_scenarios.h"
#include "tests/support/dsmd_process.h"

namespace dsm::testing {
namespace {

class ExamplesOnOneHost : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dsmd_.ok());
    dsmd_.ExportSocket();  // the example processes find it through $DSM_SOCKET
  }
  DsmdProcess dsmd_;
  ExampleRunner runner_;
  const HostOf here_ = [](int) { return 0; };
};

TEST_F(ExamplesOnOneHost, MatrixFactorizationThreeWorkersMatchOne) {
  ExpectMatrixFactorizationMatchesOneWorker(runner_, 3, here_);
}

TEST_F(ExamplesOnOneHost, BarrierOfThreeProcesses) { ExpectBarrierCompletes(runner_, 3, here_); }

TEST_F(ExamplesOnOneHost, HashTableLookedUpByOtherProcesses) {
  ExpectHashTableFoundByReaders(runner_, 2, here_);
}

}  // namespace
}  // namespace dsm::testing
