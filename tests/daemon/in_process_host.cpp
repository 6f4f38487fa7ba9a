#include "tests/daemon/in_process_host.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "daemon/tunables.h"

namespace dsm {

std::unique_ptr<InProcessHost> InProcessHost::Start(const DaemonConfig& config,
                                                    const ClusterConfig& cluster,
                                                    net::MemoryWire* wire, std::string* error) {
  std::unique_ptr<InProcessHost> host(new InProcessHost(config));
  host->backing_ = CreateBacking(BackingChoice::kMemfd, config.region_bytes, "", error);
  if (host->backing_.fd < 0 || !host->CreateControlSegment(error)) return nullptr;
  host->directory_ = std::make_unique<AreaDirectory>(host->segment_, host->backing_);
  void* base =
      mmap(nullptr, host->backing_.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, host->backing_.fd, 0);
  if (base == MAP_FAILED) {
    *error = std::string("cannot map the backing: ") + std::strerror(errno);
    return nullptr;
  }
  host->backing_base_ = static_cast<uint8_t*>(base);

  // The port dsmd would open for this host of the cluster file.
  const ClusterHost* self = cluster.Find(host->id());
  if (self == nullptr) {
    *error = "host " + std::to_string(host->id()) + " is not in the cluster";
    return nullptr;
  }
  net::PortConfig port;
  port.host_id = self->id;
  port.mac = self->mac;
  port.ipv4 = self->ipv4;
  port.udp_port = cluster.udp_port;
  port.mtu_bytes = cluster.mtu_bytes;
  for (const ClusterHost& h : cluster.hosts) {
    if (h.id != self->id) port.peers.push_back({h.id, h.mac, h.ipv4});
  }
  if (cluster.multicast) port.groups.push_back(kClusterGroup);
  std::unique_ptr<net::Transport> transport = wire->Open(port, error);
  if (!transport) return nullptr;
  host->remote_ = std::make_unique<RemoteSync>(config, cluster, host->segment_,
                                               host->directory_.get(), host->backing_base_);
  if (!host->remote_->Start(std::move(transport), error)) return nullptr;
  return host;
}

InProcessHost::~InProcessHost() {
  if (remote_) remote_->ReleasePins();
  remote_.reset();
  directory_.reset();
  if (backing_base_) munmap(backing_base_, backing_.bytes);
  if (backing_.fd >= 0) close(backing_.fd);
  if (segment_) munmap(segment_, sizeof(ControlSegment));
}

bool InProcessHost::CreateControlSegment(std::string* error) {
  void* p = mmap(nullptr, sizeof(ControlSegment), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    *error = std::string("cannot map a control segment: ") + std::strerror(errno);
    return false;
  }
  // Zero-filled: every area is kFree.
  segment_ = new (p) ControlSegment;
  ControlHeader& h = segment_->header;
  h.magic = kControlMagic;
  h.layout_version = kLayoutVersion;
  h.host_id = config_.host_id;
  h.region_base = kRegionBase;
  h.region_bytes = kRegionBytes;
  h.slice_base = kRegionBase + uint64_t{config_.host_id} * kHostSliceBytes;
  h.slice_bytes = kHostSliceBytes;
  h.backing_bytes = backing_.bytes;
  h.backing_page_bytes = backing_.page_bytes;
  h.backing_kind = backing_.kind;
  h.daemon_pid = getpid();
  h.default_sync_interval_ns = uint64_t{config_.sync_interval_us} * 1000;
  h.default_staleness_bound_ns = uint64_t{config_.staleness_bound_ms} * 1000000;
  h.daemon_alive.store(1);
  return true;
}

}  // namespace dsm
