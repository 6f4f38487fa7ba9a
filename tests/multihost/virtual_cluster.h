// A virtual cluster for a test: scripts/cluster.sh up/down in a private state
// directory, plus helpers to reach each host's daemon. Needs root.
#ifndef DSM_TESTS_MULTIHOST_VIRTUAL_CLUSTER_H_
#define DSM_TESTS_MULTIHOST_VIRTUAL_CLUSTER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dsm::testing {

// Why multi-host tests cannot run here ("" if they can).
std::string MultihostUnavailableReason();

class VirtualCluster {
 public:
  // Brings up `hosts` hosts; `dsmd_args` go to every daemon.
  VirtualCluster(int hosts, std::vector<std::string> dsmd_args = {}, std::string cluster_args = "");
  ~VirtualCluster();  // always tears down
  VirtualCluster(const VirtualCluster&) = delete;
  VirtualCluster& operator=(const VirtualCluster&) = delete;

  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }
  std::string socket(int host) const { return dir_ + "/h" + std::to_string(host) + ".sock"; }
  int DaemonPid(int host) const;
  // Restarts host's daemon (after it died), with the cluster's dsmd args.
  bool StartDaemon(int host);
  // dsmctl --json `what` (all, timeline, ...) of a host's daemon (null on failure).
  nlohmann::json Dsmctl(int host, const std::string& what = "all") const;
  // In a dsmctl listing: the area named `name` (a replica or not), leaving
  // out index `skip_index` (a retired replica keeps its name there); the
  // area at `index`; the incarnation (hex) it believes host `of` has. Null
  // or "" when there is none.
  static nlohmann::json FindArea(const nlohmann::json& ctl, const std::string& name, bool replica,
                                 int64_t skip_index = -1);
  static nlohmann::json AreaAt(const nlohmann::json& ctl, uint32_t index);
  static std::string IncarnationOf(const nlohmann::json& ctl, int of);
  // Every other host's daemon reports `host` up (or, with `up` false, down)
  // within `ms`.
  bool OthersSee(int host, bool up, int ms) const;
  // Runs a shell command; returns its exit status.
  static int Run(const std::string& command);
  // Runs `command` in host's network namespace.
  int Exec(int host, const std::string& command) const;

 private:
  std::string dir_;
  std::string dsmd_args_;
  int hosts_ = 0;
  bool ok_ = false;
};

}  // namespace dsm::testing

#endif  // DSM_TESTS_MULTIHOST_VIRTUAL_CLUSTER_H_
