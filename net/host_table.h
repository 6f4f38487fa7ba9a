// Who this host is and whom it talks to: its own addresses, every peer's MAC
// and IPv4 by host id (for sending), host id by source IPv4 (for receiving),
// and the multicast groups it has joined. Built once from a PortConfig.
#ifndef DSM_NET_HOST_TABLE_H_
#define DSM_NET_HOST_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/transport.h"

namespace dsm::net {

// Multicast group g travels as IPv4 239.77.(g>>8).(g&255), an administratively
// scoped address, whose standard IP-to-MAC mapping is 01:00:5e:4d:(g>>8):(g&255).
inline constexpr uint32_t GroupIpv4(uint16_t group) { return (239u << 24) | (77u << 16) | group; }
inline constexpr MacAddr GroupMac(uint16_t group) {
  return {
      0x01, 0x00, 0x5e, 0x4d, static_cast<uint8_t>(group >> 8), static_cast<uint8_t>(group & 0xff)};
}
inline constexpr MacAddr kBroadcastMac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

struct Endpoint {
  MacAddr mac;
  uint32_t ipv4;  // host byte order
};

class HostTable {
 public:
  // Fails (with `error`) on a zero or multicast own address, or on two peers
  // sharing a host id or an IPv4. A peer may be this host itself (loopback tests).
  static std::optional<HostTable> Build(const MacAddr& mac, uint32_t ipv4,
                                        const std::vector<Peer>& peers,
                                        const std::vector<uint16_t>& groups, std::string* error);

  const MacAddr& mac() const { return self_.mac; }
  uint32_t ipv4() const { return self_.ipv4; }

  // Where frames to `dest` go; nullopt for an unknown peer host id.
  std::optional<Endpoint> Resolve(Destination dest) const;
  // The host that owns `ipv4`, if it is a peer.
  std::optional<uint16_t> HostOfIpv4(uint32_t ipv4) const;

  // Destination checks on received frames: our MAC, a joined group's MAC or
  // broadcast; our IPv4 or a joined group's.
  bool AcceptsDestMac(const uint8_t* mac) const;
  bool AcceptsDestIpv4(uint32_t ipv4) const;
  bool Joined(uint16_t group) const { return joined_[group]; }

 private:
  HostTable() : joined_(size_t{1} << 16, false) {}

  Endpoint self_{};
  std::unordered_map<uint16_t, Endpoint> by_host_;
  std::unordered_map<uint32_t, uint16_t> host_by_ipv4_;
  std::vector<bool> joined_;  // indexed by group id
};

// "aa:bb:cc:dd:ee:ff" and back; FormatIpv4 gives dotted quad.
std::string FormatMac(const MacAddr& mac);
std::optional<MacAddr> ParseMac(const std::string& text);
std::string FormatIpv4(uint32_t ipv4);
std::optional<uint32_t> ParseIpv4(const std::string& text);

}  // namespace dsm::net

#endif  // DSM_NET_HOST_TABLE_H_
