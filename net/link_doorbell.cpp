#include "net/link_doorbell.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dsm::net {
namespace {

bool AddressFor(const std::string& path, sockaddr_un* addr) {
  if (path.size() >= sizeof(addr->sun_path)) return false;
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

}  // namespace

std::string LinkDoorbell::PathFor(const std::string& dir, uint16_t host) {
  return dir + "/h" + std::to_string(host) + ".wake";
}

std::unique_ptr<LinkDoorbell> LinkDoorbell::Open(const std::string& dir, uint16_t self,
                                                 std::string* error) {
  const std::string path = PathFor(dir, self);
  sockaddr_un addr;
  if (!AddressFor(path, &addr)) {
    *error = "doorbell path " + path + " is too long for a Unix socket";
    return nullptr;
  }
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("doorbell socket: ") + std::strerror(errno);
    return nullptr;
  }
  unlink(path.c_str());  // one host id binds it: a file here was left by a dead daemon
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    *error = "doorbell " + path + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<LinkDoorbell>(new LinkDoorbell(fd, dir, path));
}

LinkDoorbell::~LinkDoorbell() {
  close(fd_);
  unlink(path_.c_str());
}

void LinkDoorbell::Ring(uint16_t peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    sockaddr_un addr;
    if (!AddressFor(PathFor(dir_, peer), &addr)) return;
    it = peers_.emplace(peer, addr).first;
  }
  const char ring = 1;
  (void)!sendto(fd_, &ring, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                reinterpret_cast<const sockaddr*>(&it->second), sizeof(it->second));
}

void LinkDoorbell::Drain() {
  // A ring is one datagram: take them in batches, not one call each.
  constexpr unsigned kBatch = 64;
  char bytes[kBatch];
  iovec iov[kBatch];
  mmsghdr msgs[kBatch];
  for (unsigned i = 0; i < kBatch; ++i) {
    iov[i] = iovec{&bytes[i], 1};
    msgs[i] = mmsghdr{};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  while (recvmmsg(fd_, msgs, kBatch, MSG_DONTWAIT, nullptr) == static_cast<int>(kBatch)) {
  }
}

}  // namespace dsm::net
