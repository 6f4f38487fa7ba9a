// Running the example programs from a test: several at once (on one host or on
// the hosts of a virtual cluster), each bounded in time, with their output in a
// log file and their summaries in JSON files of a private directory.
#ifndef DSM_TESTS_EXAMPLES_EXAMPLE_RUNS_H_
#define DSM_TESTS_EXAMPLES_EXAMPLE_RUNS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/multihost/virtual_cluster.h"

namespace dsm::testing {

// Where an example process runs: `host` of `cluster`, or here (cluster null),
// talking to the daemon that $DSM_SOCKET names.
struct ExampleRun {
  std::string command;  // binary and arguments, shell-quoted where needed
  std::string log;      // stdout and stderr go here
  int host = 1;
};

// An example binary, from the environment variable meson sets for the test.
std::string ExampleBinary(const char* env_var);

class ExampleRunner {
 public:
  explicit ExampleRunner(const VirtualCluster* cluster = nullptr);
  ~ExampleRunner();  // removes the directory
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  // Starts every run at once and waits for all (each killed after timeout_s);
  // returns their exit codes, printing the log of each that failed.
  std::vector<int> RunTogether(const std::vector<ExampleRun>& runs, int timeout_s) const;
  // The JSON file `name` in dir() (discarded if missing or malformed).
  nlohmann::json ReadJson(const std::string& name) const;

 private:
  const VirtualCluster* cluster_;
  std::string dir_;
};

}  // namespace dsm::testing

#endif  // DSM_TESTS_EXAMPLES_EXAMPLE_RUNS_H_
