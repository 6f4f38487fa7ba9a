#include "tests/support/process_group.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "tests/support/child_process.h"

namespace dsm::testing {

ProcessGroup::~ProcessGroup() {
  for (pid_t pid : stopped_) kill(pid, SIGCONT);
  if (on_end_) on_end_();
  for (pid_t pid : children_) Reap(pid, 10000);
}

pid_t ProcessGroup::Start(const std::function<int()>& body) {
  const pid_t pid = Spawn(body);
  children_.push_back(pid);
  return pid;
}

int ProcessGroup::Finish(pid_t pid, int timeout_ms) {
  std::erase(children_, pid);
  return Reap(pid, timeout_ms);
}

bool ProcessGroup::Stop(pid_t pid) {
  if (pid <= 0 || kill(pid, SIGSTOP) != 0) return false;
  stopped_.push_back(pid);
  // SIGSTOP takes effect asynchronously; a child's stop can be waited for.
  if (std::find(children_.begin(), children_.end(), pid) != children_.end()) {
    for (int i = 0; i < 10000; ++i) {
      siginfo_t info{};
      if (waitid(P_PID, pid, &info, WSTOPPED | WNOHANG | WNOWAIT) != 0 || info.si_pid == pid) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void ProcessGroup::Continue(pid_t pid) {
  kill(pid, SIGCONT);
  std::erase(stopped_, pid);
}

int ProcessGroup::Pause(pid_t pid, int ms) {
  if (pid <= 0 || kill(pid, SIGSTOP) != 0) return -1;
  stopped_.push_back(pid);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  Continue(pid);
  const auto took = std::chrono::steady_clock::now() - t0;
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
}

}  // namespace dsm::testing
