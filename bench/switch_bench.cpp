// The reader's side of a publish: how long a reader process takes to move to a
// new, already complete version of an area. That is dsm_wait_version() for it:
// the quiescence gate, pinning the new buffer, and moving the area's address
// onto that buffer (mremap of its parked page tables; a fresh MAP_POPULATE
// mapping where parking is not possible). The reader is a child process (this
// binary re-executed with --reader-child) that attaches the area and times its
// own calls; each iteration the parent publishes a new version (untimed), asks
// the child to move to it, and the child checks the new value it sees.
// Reference, timed in the parent in the same iteration: a memcpy of the whole
// area, what a reader that copied versions instead of remapping would pay:
// x_memcpy_area = switch time / that memcpy.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "bench/bench_support.h"
#include "dsm/dsm.h"

extern char** environ;

namespace dsm::bench {
namespace {

// The child's end of the two pipes, at fixed descriptor numbers.
constexpr int kCommandFd = 3;
constexpr int kReplyFd = 4;
constexpr const char* kReaderChildFlag = "--reader-child";
constexpr uint32_t kChildTimeoutMs = 5000;

// Parent -> child: move to `version` (0: detach and exit) and check that the
// float at `offset` then reads `expected`.
struct Command {
  uint64_t version;
  uint64_t offset;
  float expected;
};

// Child -> parent: after attaching (ns = 0), and after each Command.
struct Reply {
  int32_t rc;          // DSM_OK, or what dsm_init/dsm_attach/dsm_wait_version returned
  int32_t value_ok;    // the new version holds the expected value
  uint64_t switch_ns;  // time of dsm_wait_version
};

bool ReadFull(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteFull(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

int ReaderChildMain(const char* area_name) {
  Reply reply{};
  const void* area = nullptr;
  reply.rc = dsm_init(nullptr);
  if (reply.rc == DSM_OK) reply.rc = dsm_attach(area_name, kChildTimeoutMs, &area, nullptr);
  if (reply.rc != DSM_OK) {
    std::fprintf(stderr, "switch_bench reader: %s: %s\n", dsm_strerror(reply.rc), dsm_last_error());
  }
  if (!WriteFull(kReplyFd, &reply, sizeof(reply)) || reply.rc != DSM_OK) return 1;
  Command cmd{};
  while (ReadFull(kCommandFd, &cmd, sizeof(cmd)) && cmd.version != 0) {
    const Clock::time_point t0 = Clock::now();
    reply.rc = dsm_wait_version(area, cmd.version, kChildTimeoutMs);
    reply.switch_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    float seen = 0;
    std::memcpy(&seen, static_cast<const uint8_t*>(area) + cmd.offset, sizeof(seen));
    reply.value_ok = seen == cmd.expected;
    if (!WriteFull(kReplyFd, &reply, sizeof(reply))) break;
  }
  return dsm_fini() == DSM_OK ? 0 : 1;
}

// The reader child process, from the parent's side. The destructor closes the
// command pipe (the child then detaches and exits) and reaps it.
class ReaderChild {
 public:
  ReaderChild() = default;
  ReaderChild(const ReaderChild&) = delete;
  ReaderChild& operator=(const ReaderChild&) = delete;
  ~ReaderChild() {
    if (command_fd_ >= 0) close(command_fd_);
    if (reply_fd_ >= 0) close(reply_fd_);
    if (pid_ > 0) {
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }

  // Starts the child and waits until it has attached `area_name`.
  bool Start(const std::string& area_name, std::string* error) {
    int command[2], reply[2];
    if (pipe2(command, O_CLOEXEC) != 0) return Error(error, "pipe2");
    command_fd_ = command[1];
    if (pipe2(reply, O_CLOEXEC) != 0) {
      close(command[0]);
      return Error(error, "pipe2");
    }
    reply_fd_ = reply[0];
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, command[0], kCommandFd);
    posix_spawn_file_actions_adddup2(&actions, reply[1], kReplyFd);
    std::string exe = "/proc/self/exe", flag = kReaderChildFlag, name = area_name;
    char* argv[] = {exe.data(), flag.data(), name.data(), nullptr};
    const int rc = posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(command[0]);
    close(reply[1]);
    if (rc != 0) {
      pid_ = -1;
      errno = rc;
      return Error(error, "posix_spawn");
    }
    Reply ready{};
    if (!ReadFull(reply_fd_, &ready, sizeof(ready)) || ready.rc != DSM_OK) {
      *error = "the reader child could not attach the area (see its stderr)";
      return false;
    }
    return true;
  }

  bool Switch(const Command& cmd, Reply* reply) {
    return WriteFull(command_fd_, &cmd, sizeof(cmd)) && ReadFull(reply_fd_, reply, sizeof(*reply));
  }

 private:
  static bool Error(std::string* error, const char* what) {
    *error = std::string(what) + ": " + std::strerror(errno);
    return false;
  }

  pid_t pid_ = -1;
  int command_fd_ = -1;
  int reply_fd_ = -1;
};

void RunSwitch(benchmark::State& state, size_t bytes) {
  const std::string name = "bench/switch/" + std::to_string(bytes >> 20) + "MiB";
  auto* area = static_cast<uint8_t*>(AllocWarmArea(name.c_str(), bytes));
  if (!area) {
    state.SkipWithError("cannot allocate the benchmark area (see stderr)");
    return;
  }
  double switch_s = 0, memcpy_s = 0;
  {
    Buffer ref_src(bytes), ref_dst(bytes);
    ReaderChild child;
    std::string error;
    if (!child.Start(name, &error)) state.SkipWithError(error.c_str());
    const size_t lines = bytes / kLineBytes;
    float value = 0;
    uint64_t step = 0;
    for (auto _ : state) {
      value += 1.0f;
      Command cmd{};
      cmd.offset = (step++ * 4099 % lines) * kLineBytes;  // a different line each time
      cmd.expected = value;
      std::memcpy(area + cmd.offset, &value, sizeof(value));
      if (int rc = dsm_log(area + cmd.offset, sizeof(value)); rc != DSM_OK) {
        state.SkipWithError(dsm_last_error());
        break;
      }
      if (int rc = dsm_publish(area); rc != DSM_OK) {
        state.SkipWithError(dsm_last_error());
        break;
      }
      cmd.version = dsm_version(area);
      Reply reply{};
      if (!child.Switch(cmd, &reply)) {
        state.SkipWithError("lost the reader child");
        break;
      }
      if (reply.rc != DSM_OK || !reply.value_ok) {
        state.SkipWithError(reply.rc != DSM_OK ? "the reader's dsm_wait_version failed"
                                               : "the reader saw the wrong value after the switch");
        break;
      }
      const double s = static_cast<double>(reply.switch_ns) * 1e-9;
      state.SetIterationTime(s);
      switch_s += s;

      const Clock::time_point t0 = Clock::now();
      std::memcpy(ref_dst.data(), ref_src.data(), bytes);
      benchmark::ClobberMemory();
      memcpy_s += SecondsSince(t0);
    }
  }
  dsm_free(area);
  if (switch_s > 0 && memcpy_s > 0) {
    state.counters["x_memcpy_area"] = switch_s / memcpy_s;
    state.counters["memcpy_area_us"] = memcpy_s * 1e6 / static_cast<double>(state.iterations());
  }
}

void RegisterAll() {
  struct Case {
    const char* name;
    size_t bytes;
    int iterations;
  };
  static const Case cases[] = {
      {"switch/area:1MiB", size_t{1} << 20, 300},
      {"switch/area:64MiB", kAreaBytes, 40},
  };
  for (const Case& c : cases) {
    benchmark::RegisterBenchmark(c.name,
                                 [&c](benchmark::State& state) { RunSwitch(state, c.bytes); })
        ->UseManualTime()
        ->Iterations(c.iterations)
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace dsm::bench

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], dsm::bench::kReaderChildFlag) == 0) {
    return dsm::bench::ReaderChildMain(argv[2]);
  }
  dsm::bench::RegisterAll();
  return dsm::bench::RunWithPrivateDaemon(argc, argv);
}
