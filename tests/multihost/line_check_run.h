// One run of the line-check workload (line_check_workload.h) on a virtual
// cluster: a writer on host 1, a reader on each of hosts 2 and 3, every
// snapshot checked line by line and the final content by XXH3; the gtest
// expectations of a run, and a one-line report of what it saw.
#ifndef DSM_TESTS_MULTIHOST_LINE_CHECK_RUN_H_
#define DSM_TESTS_MULTIHOST_LINE_CHECK_RUN_H_

#include <string>

#include "tests/multihost/line_check_workload.h"
#include "tests/multihost/virtual_cluster.h"

namespace dsm::testing::line_check {

struct RunResult {
  bool passed = false;  // the run added no test failure
  double seconds = 0;
  double first_version_s[kReaders] = {};  // each reader's dsm_attach
  double catch_up_s[kReaders] = {};       // the writer's last version published -> seen
};

// One run on `cluster` (its hosts up). With `stall`, the writer is stopped
// now and then inside a publish for longer than dsmd waits for a publish to
// end (SyncParams::export_wait_ns), and host 1's daemon is stopped for a while
// as the writer goes on. `label` starts the report line; `repro` is traced in
// every failure.
void RunOnCluster(VirtualCluster& cluster, const Options& o, bool stall, const std::string& label,
                  const std::string& repro, RunResult* result);

}  // namespace dsm::testing::line_check

#endif  // DSM_TESTS_MULTIHOST_LINE_CHECK_RUN_H_
