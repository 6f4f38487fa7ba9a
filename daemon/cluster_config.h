// The cluster file: every host's id, MAC, IPv4 and DPDK device (TOML, written
// by scripts/cluster.sh or by hand; docs/virtual-cluster.md).
#ifndef DSM_DAEMON_CLUSTER_CONFIG_H_
#define DSM_DAEMON_CLUSTER_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "net/transport.h"

namespace dsm {

struct ClusterHost {
  uint16_t id = 0;
  net::MacAddr mac{};
  uint32_t ipv4 = 0;  // host byte order
  std::string device;  // one port to every peer; or:
  std::vector<net::Link> links;  // one point-to-point port per peer ([[host.link]])
};

struct ClusterConfig {
  uint16_t udp_port = 7400;
  uint32_t mtu_bytes = 1500;
  bool multicast = true;
  // Frames carry an AES-256-GMAC tag with the keys in this file (key_file.h);
  // empty: checksums only. A relative path is taken from the cluster file's
  // directory.
  std::string key_file;
  std::vector<ClusterHost> hosts;

  const ClusterHost* Find(uint16_t id) const;
};

// Parses `path`. On error returns nothing and `error` names the file, line and problem.
// The port of host `self` in `cluster`: its addresses, its peers', the
// cluster's UDP port, MTU and multicast group (device and pacing are the
// caller's).
net::PortConfig PortConfigFor(const ClusterConfig& cluster, const ClusterHost& self);

std::optional<ClusterConfig> LoadClusterConfig(const std::string& path, std::string* error);

bool ParseMac(const std::string& text, net::MacAddr* out);
bool ParseIpv4(const std::string& text, uint32_t* out);

}  // namespace dsm

#endif  // DSM_DAEMON_CLUSTER_CONFIG_H_
