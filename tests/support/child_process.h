// Multi-process test helpers: run a function in a forked child, reap it with a
// bounded wait, and share a plain struct between parent and children.
#ifndef DSM_TESTS_SUPPORT_CHILD_PROCESS_H_
#define DSM_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <sys/mman.h>
#include <sys/types.h>

#include <functional>
#include <new>
#include <string>

namespace dsm::testing {

// Forks; the child runs `body` and exits with its return value (never returns).
pid_t Spawn(const std::function<int()>& body);

// Exit code of the child (0-255), or -signal if it was killed by a signal.
// After `timeout_ms` the child is killed with SIGKILL and -SIGKILL returned.
int Reap(pid_t pid, int timeout_ms);

// A T in MAP_SHARED anonymous memory, visible to children forked later.
template <typename T>
class Shared {
 public:
  Shared() {
    void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    value_ = p == MAP_FAILED ? nullptr : new (p) T();
  }
  ~Shared() {
    if (value_) {
      value_->~T();
      munmap(value_, sizeof(T));
    }
  }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  T* operator->() const { return value_; }
  T& operator*() const { return *value_; }

 private:
  T* value_;
};

// Polls `cond` every millisecond for at most `timeout_ms`. Returns whether it held.
bool WaitFor(const std::function<bool()>& cond, int timeout_ms);

// Runs a shell command and returns its standard output ("" if it cannot run).
std::string Capture(const std::string& command);

}  // namespace dsm::testing

#endif  // DSM_TESTS_SUPPORT_CHILD_PROCESS_H_
