#include "tests/support/child_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

namespace dsm::testing {

pid_t Spawn(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 100;
    rc = body();
    std::fflush(nullptr);
    _exit(rc);
  }
  return pid;
}

int Reap(pid_t pid, int timeout_ms) {
  if (pid <= 0) return -1;
  int status = 0;
  for (int waited = 0; waited <= timeout_ms; waited += 2) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::fprintf(stderr, "child %d did not finish within %d ms: killing it\n", pid, timeout_ms);
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -SIGKILL;
}

bool WaitFor(const std::function<bool()>& cond, int timeout_ms) {
  // By the clock, not by count: a slow `cond` (one that runs dsmctl) must
  // not stretch the bound.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return cond();
}

std::string Capture(const std::string& command) {
  std::string out;
  FILE* f = popen(command.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

}  // namespace dsm::testing
