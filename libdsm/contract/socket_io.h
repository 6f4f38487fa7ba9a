// Fixed-size messages with optional file descriptors over a SOCK_SEQPACKET Unix
// socket. Shared by libdsm and dsmd.
#ifndef DSM_LIBDSM_CONTRACT_SOCKET_IO_H_
#define DSM_LIBDSM_CONTRACT_SOCKET_IO_H_

#include <cstddef>
#include <span>

namespace dsm {

// Sends one message of `len` bytes carrying `fds` (may be empty). Returns 0 or -errno.
int SendMessage(int sock, const void* msg, size_t len, std::span<const int> fds = {});

// Receives one message into `msg` (exactly `len` bytes expected) and up to
// fds.size() descriptors (unused entries set to -1). Waits up to timeout_ms
// (-1: forever). Returns bytes received, 0 on peer close, -ETIMEDOUT or -errno.
long RecvMessage(int sock, void* msg, size_t len, std::span<int> fds, int timeout_ms);

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_SOCKET_IO_H_
