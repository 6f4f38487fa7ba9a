// dsmd: owns the backing and the control segment, serves local clients on the
// control socket (the control server protocol, libdsm/contract/control_protocol.h),
// and runs the event loop (clients, signals, remote sync). Single threaded:
// every method runs on the daemon's main thread.
#ifndef DSM_DAEMON_DAEMON_H_
#define DSM_DAEMON_DAEMON_H_

#include <memory>
#include <string>
#include <unordered_map>

#include "daemon/area_directory.h"
#include "daemon/backing.h"
#include "daemon/daemon_config.h"
#include "daemon/remote_sync.h"
#include "daemon/stage_applier.h"
#include "libdsm/contract/shm_layout.h"

namespace dsm {

// Fills the header of a fresh (zero-filled) control segment: this host, its
// slice of the region, the backing, dsmd's defaults for areas; marks the
// daemon alive (this process).
void InitControlHeader(ControlSegment* segment, const DaemonConfig& config, const Backing& backing);

class Daemon {
 public:
  explicit Daemon(const DaemonConfig& config);
  ~Daemon();

  // Creates backing, control segment and socket. On failure `error` says why and
  // how to fix it.
  bool Start(std::string* error);
  // Serves until SIGTERM/SIGINT. Returns the process exit code.
  int Run();

 private:
  struct Connection {
    Client client;
    int fd;
  };

  bool CreateControlSegment(std::string* error);
  bool Listen(std::string* error);
  void Accept();
  void HandleRequest(Connection& conn);
  void Disconnect(int fd);
  void Shutdown();
  // How long the loop may sleep: 0 while remote sync has work, then doubling.
  int64_t IdleSleepNs(bool worked);
  // Arms the doorbell before a sleep of `sleep_ns`; returns the sleep to take (0
  // if a publish to ship slipped in before the arm).
  int64_t ArmDoorbell(int64_t sleep_ns);

  uint32_t idle_turns_ = 0;
  uint64_t last_epoll_ns_ = 0;  // the last look at clients and signals (Run)

  DaemonConfig config_;
  Backing backing_;
  int control_fd_ = -1;
  ControlSegment* segment_ = nullptr;
  std::unique_ptr<AreaDirectory> directory_;
  uint8_t* backing_base_ = nullptr;  // the whole backing: stages, remote sync
  std::unique_ptr<RemoteSync> remote_;
  std::unique_ptr<StageAppliers> stages_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int signal_fd_ = -1;
  int rx_wake_fd_ = -1;   // the transport's (RemoteSync::rx_wake_fd), not ours to close
  int doorbell_fd_ = -1;  // eventfd writers ring after publishing an exported area
  uint32_t next_client_id_ = 1;
  std::unordered_map<int, Connection> connections_;  // by socket fd
};

}  // namespace dsm

#endif  // DSM_DAEMON_DAEMON_H_
