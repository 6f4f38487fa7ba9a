// The checks of the examples, written once and run both with a private daemon
// (several processes on one host) and on a virtual cluster (one per host).
#ifndef DSM_TESTS_EXAMPLES_EXAMPLE_SCENARIOS_H_
#define DSM_TESTS_EXAMPLES_EXAMPLE_SCENARIOS_H_

#include <functional>

#include "tests/examples/example_runs.h"

namespace dsm::testing {

// Process k of a scenario runs on host HostOf(k) (ignored without a cluster).
using HostOf = std::function<int(int)>;

// Matrix factorization with 1 worker, then with `workers`: the RMSE goes down in
// both, and the W-worker run ends close to the 1-worker one; logs stay sparse.
void ExpectMatrixFactorizationMatchesOneWorker(const ExampleRunner& runner, int workers,
                                               const HostOf& host_of);
// The barrier sample: every process completes every round and sees every other's.
void ExpectBarrierCompletes(const ExampleRunner& runner, int workers, const HostOf& host_of);
// The hash table sample: built by process 0, every key found by each reader.
void ExpectHashTableFoundByReaders(const ExampleRunner& runner, int readers, const HostOf& host_of);

}  // namespace dsm::testing

#endif  // DSM_TESTS_EXAMPLES_EXAMPLE_SCENARIOS_H_
