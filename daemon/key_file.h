// The cluster's frame keys (docs/virtual-cluster.md, "Authenticated frames"):
// a TOML file that the cluster file names (`[cluster] key_file`), readable by
// its owner only, listing one to four keys:
//
//   [[key]]
//   id = 2                 # 1..255, carried in every frame
//   secret = "64 hex digits"
//
// The first key signs what this host sends; every listed key is accepted.
// dsmd reads the file again when it changes, so keys rotate without a
// restart: list the new key second on every host, then first, then drop the
// old one.
#ifndef DSM_DAEMON_KEY_FILE_H_
#define DSM_DAEMON_KEY_FILE_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "coherence/frame_seal.h"

namespace dsm {

// The keys in `path`, or nothing and `error` saying what to fix (a file
// others can read, a malformed or repeated key, none at all).
std::optional<std::vector<wire::FrameKey>> LoadKeyFile(const std::string& path, std::string* error);

// Whether a file changed since the last look (its inode, size or mtime).
class FileChangeWatch {
 public:
  explicit FileChangeWatch(std::string path) : path_(std::move(path)) { Changed(); }
  bool Changed();

 private:
  std::string path_;
  ino_t ino_ = 0;
  off_t size_ = -1;
  long mtime_ns_ = 0;
  time_t mtime_s_ = 0;
};

}  // namespace dsm

#endif  // DSM_DAEMON_KEY_FILE_H_
