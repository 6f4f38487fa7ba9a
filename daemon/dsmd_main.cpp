// dsmd: the per-host libdsm daemon. Owns the host's region backing and directory
// of areas and serves local clients over a Unix socket.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <map>

#include "daemon/daemon.h"
#include "daemon/daemon_config.h"
#include "daemon/instance_lock.h"

namespace {

// Parses sizes like 512M, 4G, 1048576.
bool ParseBytes(const std::string& text, uint64_t* out) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return false;
  uint64_t mult = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") mult = uint64_t{1} << 10;
  else if (suffix == "M" || suffix == "m") mult = uint64_t{1} << 20;
  else if (suffix == "G" || suffix == "g") mult = uint64_t{1} << 30;
  else if (!suffix.empty()) return false;
  *out = n * mult;
  return *out > 0;
}

}  // namespace

int main(int argc, char** argv) {
  dsm::DaemonConfig cfg;
  std::string region = "1G";
  std::string backing = "auto";
  CLI::App app{"dsmd: the libdsm per-host daemon. Owns the shared region of this host and "
               "serves local processes over a Unix socket."};
  app.add_option("--host-id", cfg.host_id, "This host's id in the cluster (0-63)")
      ->capture_default_str();
  app.add_option("--socket", cfg.socket_path, "Unix socket clients connect to")
      ->capture_default_str();
  app.add_option("--region-size", region,
                 "Backing memory for all area copies on this host (K/M/G suffixes). An area "
                 "costs (1 + reader buffers) x its size on its writer's host")
      ->capture_default_str();
  app.add_option("--backing", backing, "auto (hugetlbfs if enough free hugepages, else memfd), "
                                       "memfd or hugetlbfs")
      ->check(CLI::IsMember({"auto", "memfd", "hugetlbfs"}))
      ->capture_default_str();
  app.add_option("--hugetlbfs-dir", cfg.hugetlbfs_dir, "hugetlbfs mount for the backing file")
      ->capture_default_str();
  app.add_option("--sync-interval-us", cfg.sync_interval_us,
                 "Default sync interval of areas, microseconds")
      ->check(CLI::Range(1u, 60000000u))
      ->capture_default_str();
  app.add_option("--staleness-ms", cfg.staleness_bound_ms,
                 "Default staleness bound of areas, milliseconds")
      ->check(CLI::Range(1u, 3600000u))
      ->capture_default_str();
  app.add_option("--cluster", cfg.cluster_file,
                 "Cluster file (TOML: hosts with id, mac, ip, DPDK device). Without it this host "
                 "runs alone")
      ->check(CLI::ExistingFile);
  double pace_mbps = 0;
  app.add_option("--pace-mbps", pace_mbps, "Limit the send rate, Mbit/s (0: unpaced)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("--busy-poll", cfg.busy_poll,
               "Poll the network without ever sleeping (for a host with a core to spare)");
  app.add_flag("--no-doorbell", cfg.no_doorbell,
               "Do not let writers wake the daemon after a publish (it finds versions at its "
               "next polling turn); for measuring what the doorbell gains");
  app.add_flag("--stages,!--no-stages", cfg.stages,
               "Writers that log explicitly hand each version to the daemon, which frames it "
               "for other hosts and writes it into the reader buffers: their publish is a "
               "gather of the changed lines (the default; ignored with --no-doorbell). "
               "--no-stages: writers publish into the buffers themselves");
  app.add_option("--fault-drop", cfg.faults.drop, "Tests: probability a sent frame is dropped")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--fault-duplicate", cfg.faults.duplicate, "Tests: ... sent twice")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--fault-reorder", cfg.faults.reorder, "Tests: ... held back behind the next")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--fault-corrupt", cfg.faults.corrupt, "Tests: ... has a byte flipped")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--fault-seed", cfg.faults.seed, "Tests: seed of the fault injector");
  uint64_t export_wait_us = cfg.sync.export_wait_ns / 1000;
  app.add_option("--export-wait-us", export_wait_us,
                 "How long a collect waits for a writer inside a publish before trying again "
                 "later, microseconds (tests make it short to reach that case often)")
      ->capture_default_str();
  app.add_flag("--background", cfg.background,
               "Detach once the socket is ready (the command returns when dsmd serves)");
  app.add_option("--pid-file", cfg.pid_file, "Write the daemon's pid here");
  app.add_option("--log-level", cfg.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // scripts add defaults first
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (!ParseBytes(region, &cfg.region_bytes)) {
    std::fprintf(stderr, "dsmd: --region-size '%s' is not a size (e.g. 512M, 4G)\n", region.c_str());
    return 2;
  }
  cfg.pace_bits_per_sec = static_cast<uint64_t>(pace_mbps * 1e6);
  cfg.sync.export_wait_ns = export_wait_us * 1000;
  cfg.backing = backing == "memfd"       ? dsm::BackingChoice::kMemfd
                : backing == "hugetlbfs" ? dsm::BackingChoice::kHugetlbfs
                                         : dsm::BackingChoice::kAuto;
  auto logger = spdlog::stderr_color_mt("dsmd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  spdlog::set_pattern("[%H:%M:%S.%e] [dsmd " + std::to_string(cfg.host_id) + "] [%l] %v");

  // In background mode the parent waits on a pipe until the child serves (or fails),
  // so scripts can use the daemon as soon as the command returns.
  int ready_pipe[2] = {-1, -1};
  if (cfg.background) {
    if (pipe(ready_pipe) != 0) return 1;
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child > 0) {
      close(ready_pipe[1]);
      char status = 1;
      if (read(ready_pipe[0], &status, 1) != 1) status = 1;
      return status;
    }
    close(ready_pipe[0]);
    setsid();
  }
  auto report_ready = [&](char status) {
    if (ready_pipe[1] >= 0) {
      (void)!write(ready_pipe[1], &status, 1);
      close(ready_pipe[1]);
      ready_pipe[1] = -1;
    }
  };

  dsm::InstanceLock lock;
  std::string error;
  if (!lock.Acquire(cfg.socket_path, &error)) {
    spdlog::error("{}", error);
    report_ready(1);
    return 1;
  }
  dsm::Daemon daemon(cfg);
  if (!daemon.Start(&error)) {
    spdlog::error("cannot start: {}", error);
    report_ready(1);
    return 1;
  }
  if (!cfg.pid_file.empty()) std::ofstream(cfg.pid_file) << getpid() << "\n";
  report_ready(0);
  const int rc = daemon.Run();
  if (!cfg.pid_file.empty()) std::remove(cfg.pid_file.c_str());
  return rc;
}
