// Makes sure one dsmd serves a socket path: an flock on "<socket>.lock", held for
// the daemon's life. The kernel drops it if the daemon dies, so a stale socket
// file left by a killed daemon never blocks a restart.
#ifndef DSM_DAEMON_INSTANCE_LOCK_H_
#define DSM_DAEMON_INSTANCE_LOCK_H_

#include <string>

namespace dsm {

class InstanceLock {
 public:
  // Takes the lock; on failure returns false and `error` says who holds it.
  bool Acquire(const std::string& socket_path, std::string* error);
  ~InstanceLock();

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace dsm

#endif  // DSM_DAEMON_INSTANCE_LOCK_H_
