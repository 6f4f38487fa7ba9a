// One host of a cluster as dsmd sets it up (backing memory, control segment,
// area directory, the backing mapped for remote sync), with its RemoteSync
// on a port of a net::MemoryWire instead of a DPDK device: several hosts run
// in one process, without root, driven by the test's clock.
#ifndef DSM_TESTS_DAEMON_IN_PROCESS_HOST_H_
#define DSM_TESTS_DAEMON_IN_PROCESS_HOST_H_

#include <cstdint>
#include <memory>
#include <string>

#include "daemon/area_directory.h"
#include "daemon/backing.h"
#include "daemon/cluster_config.h"
#include "daemon/daemon_config.h"
#include "daemon/remote_sync.h"
#include "libdsm/contract/shm_layout.h"
#include "net/memory_transport.h"

namespace dsm {

// A cluster file for hosts 1..`hosts` on a MemoryWire.
ClusterConfig MemoryCluster(uint16_t hosts, bool multicast);

class InProcessHost {
 public:
  // Host `config.host_id` of `cluster`, with `config.region_bytes` of
  // backing (`config.backing`; memfd for kAuto) and its port on `wire`. nullptr on failure, with `error`.
  static std::unique_ptr<InProcessHost> Start(const DaemonConfig& config,
                                              const ClusterConfig& cluster, net::MemoryWire* wire,
                                              std::string* error);
  ~InProcessHost();
  InProcessHost(const InProcessHost&) = delete;
  InProcessHost& operator=(const InProcessHost&) = delete;

  uint16_t id() const { return static_cast<uint16_t>(config_.host_id); }
  ControlSegment& segment() { return *segment_; }
  AreaControl& area(uint32_t index) { return segment_->areas[index]; }
  AreaDirectory& directory() { return *directory_; }
  RemoteSync& remote() { return *remote_; }
  const Backing& backing() const { return backing_; }
  // A buffer's memory (the area's reader buffer `buffer`) as dsmd sees it.
  const uint8_t* Buffer(uint32_t index, uint32_t buffer) {
    return backing_base_ + area(index).buffer_offset[buffer];
  }

 private:
  explicit InProcessHost(const DaemonConfig& config) : config_(config) {}
  // The header as dsmd's Daemon writes it.
  bool CreateControlSegment(std::string* error);

  DaemonConfig config_;
  Backing backing_;
  ControlSegment* segment_ = nullptr;
  uint8_t* backing_base_ = nullptr;
  std::unique_ptr<AreaDirectory> directory_;
  std::unique_ptr<RemoteSync> remote_;
};

}  // namespace dsm

#endif  // DSM_TESTS_DAEMON_IN_PROCESS_HOST_H_
