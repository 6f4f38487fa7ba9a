// The child processes a test starts, and the ones it stops: whatever way the
// test ends, every child is reaped and nothing is left stopped.
#ifndef DSM_TESTS_SUPPORT_PROCESS_GROUP_H_
#define DSM_TESTS_SUPPORT_PROCESS_GROUP_H_

#include <sys/types.h>

#include <functional>
#include <vector>

namespace dsm::testing {

class ProcessGroup {
 public:
  // `on_end` runs first when the group ends (after every stopped process is
  // continued): it tells the children to finish, e.g. the writer to stop.
  explicit ProcessGroup(std::function<void()> on_end) : on_end_(std::move(on_end)) {}
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Runs `body` in a child (its return value is the exit code).
  pid_t Start(const std::function<int()>& body);
  // Waits for child `pid` (at most `timeout_ms`, then kills it) and returns
  // its exit code (negative: the signal that killed it).
  int Finish(pid_t pid, int timeout_ms);
  // Stops `pid` (SIGSTOP), as a scheduler may a process on a loaded host;
  // for a child of ours, returns once it is stopped. Returns whether it could
  // be signalled.
  bool Stop(pid_t pid);
  void Continue(pid_t pid);
  // Stops `pid` for `ms`, then continues it. Returns how long it was stopped
  // in fact, in ms, or -1 if it could not be signalled.
  int Pause(pid_t pid, int ms);

 private:
  std::function<void()> on_end_;
  std::vector<pid_t> children_;
  std::vector<pid_t> stopped_;
};

}  // namespace dsm::testing

#endif  // DSM_TESTS_SUPPORT_PROCESS_GROUP_H_
