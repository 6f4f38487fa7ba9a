// Wakes the daemons at the other end of a link mesh's links when frames are
// sent to them. net_memif in DPDK 22.11 has no RX interrupts, so a receiver
// that sleeps finds frames only when it next looks (up to dsmd's sleep cap
// later, and every look is a wake on cores the training fills). Each host
// binds a Unix datagram socket, `<dir>/h<host>.wake`, next to the links'
// memif sockets (a file path, so it reaches across network namespaces); a
// sender whose flush put frames on a peer's link sends that peer one byte.
// The receiver sleeps on its socket (Transport::rx_wake_fd) and drains it
// before it looks at its links, so a byte sent after the look means frames
// it has not seen.
#ifndef DSM_NET_LINK_DOORBELL_H_
#define DSM_NET_LINK_DOORBELL_H_

#include <sys/un.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace dsm::net {

class LinkDoorbell {
 public:
  // Binds host `self`'s socket in `dir` (a stale one left by a process that
  // died is replaced). nullptr, with `error`, if it cannot: the mesh then
  // only polls.
  static std::unique_ptr<LinkDoorbell> Open(const std::string& dir, uint16_t self,
                                            std::string* error);
  ~LinkDoorbell();  // closes and removes the socket
  LinkDoorbell(const LinkDoorbell&) = delete;
  LinkDoorbell& operator=(const LinkDoorbell&) = delete;

  // Readable while a ring is unread.
  int fd() const { return fd_; }
  // Tells `peer` frames are on its link. Never blocks and never fails the
  // caller: a peer not listening (not started, gone, its queue full) finds
  // the frames when it next polls.
  void Ring(uint16_t peer);
  // Reads every ring so far.
  void Drain();

  static std::string PathFor(const std::string& dir, uint16_t host);

 private:
  LinkDoorbell(int fd, std::string dir, std::string path)
      : fd_(fd), dir_(std::move(dir)), path_(std::move(path)) {}
  int fd_;
  std::string dir_;
  std::string path_;
  std::map<uint16_t, sockaddr_un> peers_;
};

}  // namespace dsm::net

#endif  // DSM_NET_LINK_DOORBELL_H_
