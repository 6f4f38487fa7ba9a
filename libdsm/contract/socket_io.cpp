#include "libdsm/contract/socket_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace dsm {

namespace {
constexpr size_t kMaxFds = 4;
}

int SendMessage(int sock, const void* msg, size_t len, std::span<const int> fds) {
  if (fds.size() > kMaxFds) return -EINVAL;
  iovec iov{const_cast<void*>(msg), len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(len)) return 0;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? -errno : -EMSGSIZE;
  }
}

long RecvMessage(int sock, void* msg, size_t len, std::span<int> fds, int timeout_ms) {
  for (int& fd : fds) fd = -1;
  pollfd p{sock, POLLIN, 0};
  for (;;) {
    const int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) return -ETIMEDOUT;
    break;
  }
  iovec iov{msg, len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  size_t got = 0;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const int* in = reinterpret_cast<const int*>(CMSG_DATA(cm));
    for (size_t i = 0; i < count; ++i) {
      if (got < fds.size()) {
        fds[got++] = in[i];
      } else {
        close(in[i]);  // more than the caller expects: do not leak them
      }
    }
  }
  if ((mh.msg_flags & MSG_TRUNC) != 0) return -EMSGSIZE;
  return n;
}

}  // namespace dsm
