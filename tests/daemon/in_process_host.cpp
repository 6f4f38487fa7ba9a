#include "tests/daemon/in_process_host.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "daemon/daemon.h"

namespace dsm {

ClusterConfig MemoryCluster(uint16_t hosts, bool multicast) {
  ClusterConfig c;
  c.multicast = multicast;
  for (uint16_t id = 1; id <= hosts; ++id) {
    ClusterHost h;
    h.id = id;
    h.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(id)};
    h.ipv4 = (10u << 24) | id;
    h.device = "memory";
    c.hosts.push_back(h);
  }
  return c;
}

std::unique_ptr<InProcessHost> InProcessHost::Start(const DaemonConfig& config,
                                                    const ClusterConfig& cluster,
                                                    net::MemoryWire* wire, std::string* error) {
  std::unique_ptr<InProcessHost> host(new InProcessHost(config));
  // kAuto would make a test's hosts differ by what the machine has free.
  const BackingChoice choice =
      config.backing == BackingChoice::kAuto ? BackingChoice::kMemfd : config.backing;
  host->backing_ = CreateBacking(choice, config.region_bytes, config.hugetlbfs_dir, error);
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
  std::unique_ptr<net::Transport> transport = wire->Open(PortConfigFor(cluster, *self), error);
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
  InitControlHeader(segment_, config_, backing_);
  return true;
}

}  // namespace dsm
