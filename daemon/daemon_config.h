// dsmd's configuration, filled from its command line.
#ifndef DSM_DAEMON_DAEMON_CONFIG_H_
#define DSM_DAEMON_DAEMON_CONFIG_H_

#include <cstdint>
#include <string>

#include "coherence/sync_params.h"
#include "dsm/dsm.h"
#include "daemon/backing.h"
#include "net/transport.h"

namespace dsm {

struct DaemonConfig {
  uint32_t host_id = 0;
  std::string socket_path = DSM_DEFAULT_SOCKET;
  uint64_t region_bytes = uint64_t{1} << 30;  // backing for all area copies on this host
  BackingChoice backing = BackingChoice::kAuto;
  std::string hugetlbfs_dir = "/dev/hugepages";
  // Defaults for areas whose alloc options leave them unset.
  uint32_t sync_interval_us = 1000;
  uint32_t staleness_bound_ms = 100;
  bool background = false;
  std::string pid_file;
  std::string log_level = "info";
  // Multi-host (empty cluster_file: this host alone).
  std::string cluster_file;
  uint64_t pace_bits_per_sec = 0;
  bool busy_poll = false;     // spin without sleeping (hosts with a dedicated core)
  bool no_doorbell = false;   // writers never wake the daemon (for measurement)
  bool stages = true;         // writers that log explicitly hand their versions to the daemon
  net::FaultConfig faults;    // injected on sent frames, for tests
  SyncParams sync;            // remote sync's timings and sizes
};

}  // namespace dsm

#endif  // DSM_DAEMON_DAEMON_CONFIG_H_
