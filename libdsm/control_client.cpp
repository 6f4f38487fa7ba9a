#include "libdsm/control_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dsm/dsm.h"
#include "libdsm/errors.h"
#include "libdsm/contract/socket_io.h"

namespace dsm {

ControlClient::~ControlClient() {
  if (fd_ >= 0) close(fd_);
  if (doorbell_fd_ >= 0) close(doorbell_fd_);
}

void ControlClient::set_doorbell(int fd) {
  if (doorbell_fd_ >= 0) close(doorbell_fd_);
  doorbell_fd_ = fd;
}

void ControlClient::RingDoorbell(std::atomic<uint32_t>& armed) const {
  // The plain load first: while the daemon is awake this costs no write to a
  // shared cache line. seq_cst, after the publish's seq_cst store to `latest`:
  // either the daemon, arming before its last look at `latest`, sees the new
  // version, or we see it armed.
  if (doorbell_fd_ < 0 || armed.load() == 0 || armed.exchange(0) == 0) return;
  const uint64_t one = 1;
  (void)!write(doorbell_fd_, &one, sizeof(one));  // EAGAIN: already ringing
}

bool ControlClient::PeerClosed() {
  std::lock_guard lock(mu_);
  if (gone_ || fd_ < 0) return true;
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR)) return true;
  char byte;  // readable: a notice waits, or the end of the stream
  return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int ControlClient::Connect(const std::string& path, int timeout_ms) {
  path_ = path;
  timeout_ms_ = timeout_ms;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Fail(DSM_ERR_INVALID, "socket path '{}' is empty or too long", path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return Fail(DSM_ERR_SYSTEM, "socket: {}", strerror(errno));
  if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd_);
    fd_ = -1;
    return Fail(DSM_ERR_NO_DAEMON,
                "no dsmd answers at {} ({}). Start one with `dsmd --background --socket {}` "
                "(built by scripts/build.sh as build/daemon/dsmd), or point DSM_SOCKET at a "
                "running one",
                path, strerror(err), path);
  }
  return DSM_OK;
}

int ControlClient::Call(Request req, Reply* reply, std::span<int> fds) {
  std::lock_guard lock(mu_);
  if (gone_ || fd_ < 0) return Fail(DSM_ERR_DAEMON_GONE, "dsmd at {} has stopped", path_);
  req.magic = kProtocolMagic;
  req.protocol_version = kProtocolVersion;
  req.pid = getpid();
  if (int rc = SendMessage(fd_, &req, sizeof(req)); rc != 0) {
    gone_ = true;
    return Fail(DSM_ERR_DAEMON_GONE, "lost dsmd at {}: {}", path_, strerror(-rc));
  }
  const long n = RecvMessage(fd_, reply, sizeof(*reply), fds, timeout_ms_);
  if (n == -ETIMEDOUT) {
    return Fail(DSM_ERR_TIMEOUT, "dsmd at {} did not answer within {} ms", path_, timeout_ms_);
  }
  if (n <= 0) {
    gone_ = true;
    return Fail(DSM_ERR_DAEMON_GONE, "dsmd at {} closed the connection", path_);
  }
  if (n != static_cast<long>(sizeof(*reply)) || reply->magic != kProtocolMagic) {
    return Fail(DSM_ERR_PROTOCOL, "malformed reply from dsmd at {}", path_);
  }
  reply->message[kMaxMessageChars - 1] = '\0';
  if (reply->type == NoticeType::kShutdown) {
    gone_ = true;
    return Fail(DSM_ERR_DAEMON_GONE, "{}", reply->message);
  }
  if (reply->status != DSM_OK) SetLastError(reply->message);
  return reply->status;
}

}  // namespace dsm
