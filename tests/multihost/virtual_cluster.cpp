#include "tests/multihost/virtual_cluster.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/child_process.h"

namespace dsm::testing {

namespace {

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string ClusterScript() { return Env("DSM_SOURCE_ROOT", ".") + "/scripts/cluster.sh"; }

}  // namespace

std::string MultihostUnavailableReason() {
  if (geteuid() != 0) return "needs root (network namespaces and veth pairs)";
  if (VirtualCluster::Run("command -v ip >/dev/null 2>&1") != 0) return "needs `ip` (iproute2)";
  return "";
}

int VirtualCluster::Run(const std::string& command) {
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

VirtualCluster::VirtualCluster(int hosts, std::vector<std::string> dsmd_args,
                               std::string cluster_args)
    : hosts_(hosts) {
  char tmpl[] = "/tmp/dsm-mh-XXXXXX";
  if (!mkdtemp(tmpl)) return;
  dir_ = tmpl;
  for (const auto& a : dsmd_args) dsmd_args_ += " " + a;
  std::ostringstream cmd;
  cmd << "DSMD=" << Env("DSM_DSMD", "dsmd") << " " << ClusterScript() << " up " << hosts
      << " --dir " << dir_ << " " << cluster_args << " -- --log-level debug" << dsmd_args_
      << " > " << dir_ << "/up.log 2>&1";
  ok_ = Run(cmd.str()) == 0;
  if (!ok_) {
    std::ifstream log(dir_ + "/up.log");
    std::fprintf(stderr, "cluster.sh up failed:\n%s\n",
                 std::string(std::istreambuf_iterator<char>(log), {}).c_str());
  }
}

VirtualCluster::~VirtualCluster() {
  // DSM_KEEP_CLUSTER=1 leaves it up with its logs, for debugging a failure.
  if (std::getenv("DSM_KEEP_CLUSTER")) {
    std::fprintf(stderr, "cluster kept in %s (scripts/cluster.sh down --dir %s)\n", dir_.c_str(),
                 dir_.c_str());
    return;
  }
  if (dir_.empty()) return;
  Run(ClusterScript() + " down --dir " + dir_ + " >/dev/null 2>&1");
  // The directory is ours (mkdtemp); cluster.sh leaves directories it did not create.
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

int VirtualCluster::DaemonPid(int host) const {
  std::ifstream f(dir_ + "/h" + std::to_string(host) + ".pid");
  int pid = -1;
  f >> pid;
  return pid;
}

bool VirtualCluster::StartDaemon(int host) {
  return Run("DSMD=" + Env("DSM_DSMD", "dsmd") + " " + ClusterScript() + " start " +
             std::to_string(host) + " --dir " + dir_ + " -- --log-level debug" + dsmd_args_ +
             " >/dev/null 2>&1") == 0;
}

nlohmann::json VirtualCluster::Dsmctl(int host, const std::string& what) const {
  const std::string out = Capture(Env("DSM_DSMCTL", "dsmctl") + " --socket " + socket(host) +
                                  " --json " + what + " 2>/dev/null");
  return nlohmann::json::parse(out, nullptr, false);
}

nlohmann::json VirtualCluster::FindArea(const nlohmann::json& ctl, const std::string& name,
                                        bool replica, int64_t skip_index) {
  if (ctl.is_discarded() || !ctl.contains("areas")) return nullptr;
  for (const nlohmann::json& a : ctl["areas"]) {
    if (a["name"] == name && a["replica"].get<bool>() == replica &&
        a["index"].get<int64_t>() != skip_index) {
      return a;
    }
  }
  return nullptr;
}

nlohmann::json VirtualCluster::AreaAt(const nlohmann::json& ctl, uint32_t index) {
  if (ctl.is_discarded() || !ctl.contains("areas")) return nullptr;
  for (const nlohmann::json& a : ctl["areas"]) {
    if (a["index"].get<uint32_t>() == index) return a;
  }
  return nullptr;
}

std::string VirtualCluster::IncarnationOf(const nlohmann::json& ctl, int of) {
  if (ctl.is_discarded() || !ctl.contains("hosts")) return "";
  for (const nlohmann::json& h : ctl["hosts"]) {
    if (h["id"].get<int>() == of && h.contains("incarnation")) {
      return h["incarnation"].get<std::string>();
    }
  }
  return "";
}

int VirtualCluster::Exec(int host, const std::string& command) const {
  return Run(ClusterScript() + " exec " + std::to_string(host) + " --dir " + dir_ + " -- " + command);
}

bool VirtualCluster::OthersSee(int host, bool up, int ms) const {
  return WaitFor(
      [&] {
        for (int h = 1; h <= hosts_; ++h) {
          if (h == host) continue;
          const auto ctl = Dsmctl(h);
          if (!ctl.is_object() || !ctl.contains("hosts")) return false;
          bool seen = false;
          for (const auto& e : ctl["hosts"]) seen |= e["id"] == host && e["up"] == up;
          if (!seen) return false;
        }
        return true;
      },
      ms);
}

}  // namespace dsm::testing
