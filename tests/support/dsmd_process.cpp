#include "tests/support/dsmd_process.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

namespace dsm::testing {

namespace {

bool CanConnect(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

std::string DsmdBinary() {
  const char* env = std::getenv("DSM_DSMD");
  return env && *env ? env : "dsmd";
}

DsmdProcess::DsmdProcess(std::vector<std::string> extra_args) {
  char tmpl[] = "/tmp/dsm-test-XXXXXX";
  if (!mkdtemp(tmpl)) return;
  dir_ = tmpl;
  socket_path_ = dir_ + "/dsmd.sock";
  std::vector<std::string> args = {DsmdBinary(), "--socket", socket_path_, "--log-level", "warn"};
  // Tests run without hugepages unless they ask for them.
  if (std::find(extra_args.begin(), extra_args.end(), "--backing") == extra_args.end()) {
    args.insert(args.end(), {"--backing", "memfd"});
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  // Bounded wait for the socket: 10 s in 5 ms steps.
  for (int i = 0; i < 2000 && pid_ > 0; ++i) {
    if (CanConnect(socket_path_)) {
      ready_ = true;
      break;
    }
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int DsmdProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = -1;
  // Bounded: 10 s, then SIGKILL.
  for (int i = 0; i < 1000; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

int DsmdProcess::Kill() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGKILL);
  int status = -1;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

DsmdProcess::~DsmdProcess() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void DsmdProcess::ExportSocket() const { setenv("DSM_SOCKET", socket_path_.c_str(), 1); }

}  // namespace dsm::testing
