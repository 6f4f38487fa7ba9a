// Starts a private dsmd for a test or benchmark (own socket in a fresh temp dir,
// memfd backing) and stops it again, by its pid, at destruction.
#ifndef DSM_TESTS_SUPPORT_DSMD_PROCESS_H_
#define DSM_TESTS_SUPPORT_DSMD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace dsm::testing {

class DsmdProcess {
 public:
  // `extra_args` are appended to dsmd's command line (e.g. {"--region-size", "64M"}).
  explicit DsmdProcess(std::vector<std::string> extra_args = {});
  ~DsmdProcess();
  DsmdProcess(const DsmdProcess&) = delete;
  DsmdProcess& operator=(const DsmdProcess&) = delete;

  // Whether the daemon came up and accepts connections.
  bool ok() const { return pid_ > 0 && ready_; }
  const std::string& socket_path() const { return socket_path_; }
  pid_t pid() const { return pid_; }
  // Sends SIGTERM and waits for exit; returns the exit status (or -1).
  int Stop();
  // SIGKILL, as a crash or an OOM kill would, and reaps it: nothing of the
  // daemon's own clean-up runs. Returns the wait status.
  int Kill();
  // Also sets DSM_SOCKET so that dsm_init(NULL) in this process and its
  // children finds this daemon.
  void ExportSocket() const;

 private:
  std::string dir_;
  std::string socket_path_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

// Path of the dsmd binary: $DSM_DSMD (set by meson for tests) or "dsmd".
std::string DsmdBinary();

}  // namespace dsm::testing

#endif  // DSM_TESTS_SUPPORT_DSMD_PROCESS_H_
