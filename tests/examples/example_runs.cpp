#include "tests/examples/example_runs.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/support/child_process.h"

namespace dsm::testing {

// What `timeout` adds before its SIGKILL, and what the reaper waits beyond that.
constexpr int kKillAfterS = 5;
constexpr int kReapSlackS = 10;

std::string ExampleBinary(const char* env_var) {
  const char* v = std::getenv(env_var);
  return v && *v ? v : "";
}

ExampleRunner::ExampleRunner(const VirtualCluster* cluster) : cluster_(cluster) {
  char tmpl[] = "/tmp/dsm-examples-XXXXXX";
  if (mkdtemp(tmpl)) dir_ = tmpl;
}

ExampleRunner::~ExampleRunner() {
  if (dir_.empty() || std::getenv("DSM_KEEP_EXAMPLE_LOGS")) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::vector<int> ExampleRunner::RunTogether(const std::vector<ExampleRun>& runs, int timeout_s) const {
  std::vector<pid_t> pids;
  for (const ExampleRun& r : runs) {
    // `timeout` inside the host: killing the shell would leave the example running.
    const std::string cmd = "timeout -k " + std::to_string(kKillAfterS) + " " + std::to_string(timeout_s) +
                            " " + r.command + " > " + r.log + " 2>&1";
    pids.push_back(Spawn([&] { return cluster_ ? cluster_->Exec(r.host, cmd) : VirtualCluster::Run(cmd); }));
  }
  std::vector<int> codes;
  for (size_t i = 0; i < pids.size(); ++i) {
    codes.push_back(Reap(pids[i], (timeout_s + kKillAfterS + kReapSlackS) * 1000));
    if (codes.back() != 0) {
      std::ifstream f(runs[i].log);
      std::fprintf(stderr, "---- %s (exit %d) ----\n%s----\n", runs[i].command.c_str(), codes.back(),
                   std::string(std::istreambuf_iterator<char>(f), {}).c_str());
    }
  }
  return codes;
}

nlohmann::json ExampleRunner::ReadJson(const std::string& name) const {
  std::ifstream f(path(name));
  return nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
}

}  // namespace dsm::testing
