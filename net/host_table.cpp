#include "net/host_table.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

namespace dsm::net {
namespace {

bool IsZero(const MacAddr& mac) {
  for (uint8_t b : mac) {
    if (b != 0) return false;
  }
  return true;
}

bool IsMulticast(const uint8_t* mac) { return (mac[0] & 1) != 0; }

}  // namespace

std::optional<HostTable> HostTable::Build(const MacAddr& mac, uint32_t ipv4,
                                          const std::vector<Peer>& peers,
                                          const std::vector<uint16_t>& groups, std::string* error) {
  if (IsZero(mac) || IsMulticast(mac.data())) {
    *error = "own MAC " + FormatMac(mac) + " is not a unicast address";
    return std::nullopt;
  }
  if (ipv4 == 0 || (ipv4 >> 28) == 0xe) {
    *error = "own IPv4 " + FormatIpv4(ipv4) + " is not a unicast address";
    return std::nullopt;
  }
  HostTable table;
  table.self_ = {mac, ipv4};
  for (const Peer& p : peers) {
    if (IsZero(p.mac) || IsMulticast(p.mac.data()) || p.ipv4 == 0 || (p.ipv4 >> 28) == 0xe) {
      *error = "peer host " + std::to_string(p.host_id) + " has no unicast MAC/IPv4 (" +
               FormatMac(p.mac) + ", " + FormatIpv4(p.ipv4) + ")";
      return std::nullopt;
    }
    if (!table.by_host_.emplace(p.host_id, Endpoint{p.mac, p.ipv4}).second) {
      *error = "peer host id " + std::to_string(p.host_id) + " is listed twice";
      return std::nullopt;
    }
    if (!table.host_by_ipv4_.emplace(p.ipv4, p.host_id).second) {
      *error = "peers " + std::to_string(table.host_by_ipv4_[p.ipv4]) + " and " +
               std::to_string(p.host_id) + " share IPv4 " + FormatIpv4(p.ipv4);
      return std::nullopt;
    }
  }
  for (uint16_t g : groups) table.joined_[g] = true;
  return table;
}

std::optional<Endpoint> HostTable::Resolve(Destination dest) const {
  if (dest.multicast) return Endpoint{GroupMac(dest.group), GroupIpv4(dest.group)};
  auto it = by_host_.find(dest.host);
  if (it == by_host_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint16_t> HostTable::HostOfIpv4(uint32_t ipv4) const {
  auto it = host_by_ipv4_.find(ipv4);
  if (it == host_by_ipv4_.end()) return std::nullopt;
  return it->second;
}

bool HostTable::AcceptsDestMac(const uint8_t* mac) const {
  if (std::memcmp(mac, self_.mac.data(), 6) == 0) return true;
  if (std::memcmp(mac, kBroadcastMac.data(), 6) == 0) return true;
  static constexpr uint8_t kGroupPrefix[4] = {0x01, 0x00, 0x5e, 0x4d};
  if (std::memcmp(mac, kGroupPrefix, 4) == 0) {
    return joined_[static_cast<uint16_t>(mac[4] << 8 | mac[5])];
  }
  return false;
}

bool HostTable::AcceptsDestIpv4(uint32_t ipv4) const {
  if (ipv4 == self_.ipv4) return true;
  if ((ipv4 >> 16) == ((239u << 8) | 77u)) return joined_[static_cast<uint16_t>(ipv4 & 0xffff)];
  return false;
}

std::string FormatMac(const MacAddr& mac) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                mac[4], mac[5]);
  return buf;
}

std::optional<MacAddr> ParseMac(const std::string& text) {
  MacAddr mac{};
  unsigned v[6];
  char tail;
  if (std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4],
                  &v[5], &tail) != 6) {
    return std::nullopt;
  }
  for (int i = 0; i < 6; ++i) mac[i] = static_cast<uint8_t>(v[i]);
  return mac;
}

std::string FormatIpv4(uint32_t ipv4) {
  return std::to_string(ipv4 >> 24) + "." + std::to_string((ipv4 >> 16) & 255) + "." +
         std::to_string((ipv4 >> 8) & 255) + "." + std::to_string(ipv4 & 255);
}

std::optional<uint32_t> ParseIpv4(const std::string& text) {
  in_addr addr{};
  if (inet_pton(AF_INET, text.c_str(), &addr) != 1) return std::nullopt;
  return ntohl(addr.s_addr);
}

}  // namespace dsm::net
