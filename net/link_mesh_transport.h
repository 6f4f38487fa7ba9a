// A Transport over point-to-point links, one DPDK port per peer. For devices
// that join exactly two processes (net_memif between daemons on one machine):
// N hosts are a full mesh of N(N-1)/2 links. Unicast leaves on the peer's
// link; a multicast group is fanned out to every link: one mbuf (chain),
// referenced by each link's queue, which memif copies into each link's ring
// (the wire cost grows with the peers, as with unicast). Receiving polls
// every link in turn.
#ifndef DSM_NET_LINK_MESH_TRANSPORT_H_
#define DSM_NET_LINK_MESH_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "net/transport.h"

namespace dsm::net {

// `base` as for OpenDpdkTransport (its `device` is ignored; `peers` lists every
// peer); each link names its peer (one of `base.peers`) and its device.
std::unique_ptr<Transport> OpenLinkMeshTransport(const PortConfig& base,
                                                 const std::vector<Link>& links,
                                                 std::string* error);

}  // namespace dsm::net

#endif  // DSM_NET_LINK_MESH_TRANSPORT_H_
