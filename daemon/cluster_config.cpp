#include "daemon/cluster_config.h"

#include <arpa/inet.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <toml++/toml.h>

#include "coherence/constants.h"
#include "daemon/tunables.h"
#include "libdsm/contract/region_limits.h"

namespace dsm {

const ClusterHost* ClusterConfig::Find(uint16_t id) const {
  for (const ClusterHost& h : hosts) {
    if (h.id == id) return &h;
  }
  return nullptr;
}

bool ParseMac(const std::string& text, net::MacAddr* out) {
  unsigned b[6];
  char tail;
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                  &tail) != 6) {
    return false;
  }
  for (int i = 0; i < 6; ++i) {
    if (b[i] > 0xff) return false;
    (*out)[i] = static_cast<uint8_t>(b[i]);
  }
  return ((*out)[0] & 1) == 0;  // a unicast MAC
}

bool ParseIpv4(const std::string& text, uint32_t* out) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

std::optional<ClusterConfig> LoadClusterConfig(const std::string& path, std::string* error) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    *error = path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description());
    return std::nullopt;
  }
  ClusterConfig cfg;
  cfg.udp_port = static_cast<uint16_t>(doc["cluster"]["udp_port"].value_or(7400));
  cfg.mtu_bytes = static_cast<uint32_t>(doc["cluster"]["mtu"].value_or(1500));
  cfg.multicast = doc["cluster"]["multicast"].value_or(true);
  if (const auto key_file = doc["cluster"]["key_file"].value<std::string>()) {
    const std::filesystem::path p(*key_file);
    cfg.key_file = p.is_absolute() ? p.string()
                                   : (std::filesystem::path(path).parent_path() / p).string();
  }
  if (cfg.mtu_bytes < 576 || cfg.mtu_bytes > 65000) {
    *error = path + ": [cluster] mtu must be 576..65000";
    return std::nullopt;
  }
  const toml::array* hosts = doc["host"].as_array();
  if (!hosts || hosts->empty()) {
    *error = path + ": no [[host]] entries";
    return std::nullopt;
  }
  std::set<uint16_t> ids;
  for (const toml::node& node : *hosts) {
    const toml::table* t = node.as_table();
    const int line = static_cast<int>(node.source().begin.line);
    auto fail = [&](const std::string& what) {
      *error = path + ":" + std::to_string(line) + ": [[host]] " + what;
      return std::nullopt;
    };
    if (!t) return fail("is not a table");
    ClusterHost h;
    const auto id = (*t)["id"].value<int64_t>();
    if (!id || *id < 0 || *id >= static_cast<int64_t>(kMaxHosts)) {
      return fail("needs an id in 0.." + std::to_string(kMaxHosts - 1));
    }
    h.id = static_cast<uint16_t>(*id);
    if (!ids.insert(h.id).second) return fail("id " + std::to_string(h.id) + " appears twice");
    if (!ParseMac((*t)["mac"].value_or(std::string()), &h.mac)) {
      return fail("needs a unicast mac like \"02:00:c6:12:00:01\"");
    }
    if (!ParseIpv4((*t)["ip"].value_or(std::string()), &h.ipv4)) {
      return fail("needs an ip like \"198.18.0.1\"");
    }
    h.device = (*t)["device"].value_or(std::string());
    if (const toml::array* links = (*t)["link"].as_array()) {
      for (const toml::node& l : *links) {
        const toml::table* lt = l.as_table();
        const auto peer = lt ? (*lt)["peer"].value<int64_t>() : std::nullopt;
        const std::string device = lt ? (*lt)["device"].value_or(std::string()) : std::string();
        if (!peer || *peer < 0 || *peer >= static_cast<int64_t>(kMaxHosts) || device.empty()) {
          return fail("id " + std::to_string(h.id) + ": each [[host.link]] needs a peer (host id) and a device");
        }
        h.links.push_back({static_cast<uint16_t>(*peer), device});
      }
    }
    if (h.device.empty() == h.links.empty()) {
      return fail("id " + std::to_string(h.id) +
                  " needs either a device (DPDK device arguments) or [[host.link]] entries, one per peer");
    }
    cfg.hosts.push_back(h);
  }
  // Links join hosts of this file, each pair at most once per side.
  for (const ClusterHost& h : cfg.hosts) {
    std::set<uint16_t> peers;
    for (const net::Link& l : h.links) {
      if (l.peer == h.id || !ids.count(l.peer) || !peers.insert(l.peer).second) {
        *error = path + ": host " + std::to_string(h.id) + ": link to host " + std::to_string(l.peer) +
                 (l.peer == h.id ? " (itself)" : !ids.count(l.peer) ? " (not in the file)" : " (twice)");
        return std::nullopt;
      }
    }
  }
  return cfg;
}

net::PortConfig PortConfigFor(const ClusterConfig& cluster, const ClusterHost& self) {
  net::PortConfig port;
  port.host_id = self.id;
  port.mac = self.mac;
  port.ipv4 = self.ipv4;
  port.udp_port = cluster.udp_port;
  port.mtu_bytes = cluster.mtu_bytes;
  for (const ClusterHost& h : cluster.hosts) {
    if (h.id != self.id) port.peers.push_back({h.id, h.mac, h.ipv4});
  }
  if (cluster.multicast) port.groups.push_back(kClusterGroup);
  return port;
}

}  // namespace dsm
