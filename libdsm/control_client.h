// The client's connection to its host's dsmd: one request, one reply at a time.
#ifndef DSM_LIBDSM_CONTROL_CLIENT_H_
#define DSM_LIBDSM_CONTROL_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include "libdsm/contract/control_protocol.h"

namespace dsm {

class ControlClient {
 public:
  ~ControlClient();
  // Connects to the daemon at `path`. DSM_OK or DSM_ERR_NO_DAEMON (message says how to start one).
  int Connect(const std::string& path, int timeout_ms);
  // Sends `req` and waits for the reply; `fds` receives descriptors the reply carries.
  // Returns the reply's status, or DSM_ERR_DAEMON_GONE / DSM_ERR_PROTOCOL; the
  // message goes to dsm_last_error() on failure.
  int Call(Request req, Reply* reply, std::span<int> fds = {});
  bool daemon_gone() const { return gone_; }
  // Whether the daemon's end of the connection is closed (it stopped or
  // crashed), without a round trip; safe across PID namespaces.
  bool PeerClosed();

  // Takes ownership of the doorbell eventfd the daemon passed at hello (-1: none).
  void set_doorbell(int fd);
  // Wakes the daemon after a publish it must ship, if it is asleep waiting for
  // one (it set `armed`). Lock-free: callable from any thread.
  void RingDoorbell(std::atomic<uint32_t>& armed) const;

 private:
  std::mutex mu_;
  int fd_ = -1;
  int doorbell_fd_ = -1;
  int timeout_ms_ = 2000;
  bool gone_ = false;
  std::string path_;
};

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTROL_CLIENT_H_
