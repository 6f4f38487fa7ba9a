#include "daemon/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace dsm {

bool InstanceLock::Acquire(const std::string& socket_path, std::string* error) {
  path_ = socket_path + ".lock";
  for (int attempt = 0; attempt < 8; ++attempt) {
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      *error = "cannot open " + path_ + ": " + std::strerror(errno);
      return false;
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) break;
    // A daemon that just exited may have unlinked the file we locked: only a
    // lock on the file the path names now counts.
    struct stat held {}, named {};
    if (fstat(fd_, &held) == 0 && stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      const std::string mine = std::to_string(getpid());
      if (ftruncate(fd_, 0) != 0 || pwrite(fd_, mine.data(), mine.size(), 0) < 0) {
        // The pid in the lock file is informational only.
      }
      return true;
    }
    close(fd_);
    fd_ = -1;
  }
  if (fd_ >= 0) {
    char pid[32] = {};
    (void)!pread(fd_, pid, sizeof(pid) - 1, 0);
    *error = "another dsmd (pid " + std::string(pid[0] ? pid : "?") + ") is already serving " +
             socket_path + "; stop it first or pick another --socket";
    close(fd_);
    fd_ = -1;
  } else {
    *error = "cannot lock " + path_;
  }
  return false;
}

InstanceLock::~InstanceLock() {
  if (fd_ >= 0) {
    unlink(path_.c_str());
    close(fd_);
  }
}

}  // namespace dsm
