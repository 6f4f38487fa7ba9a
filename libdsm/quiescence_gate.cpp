#include "libdsm/quiescence_gate.h"

#include <chrono>

#include "libdsm/contract/clock.h"

namespace dsm {

namespace {

// How long a waiting thread sleeps before re-checking `done()`: conditions such
// as "a newer version exists" change in shared memory, not through the gate.
constexpr uint64_t kRecheckNs = 200 * 1000;

struct ThreadRegistration {
  bool registered = false;
  bool online = false;
  ~ThreadRegistration() {
    if (registered && online) QuiescenceGate::Instance().Offline();
  }
};
thread_local ThreadRegistration t_thread;

}  // namespace

QuiescenceGate& QuiescenceGate::Instance() {
  static QuiescenceGate* gate = new QuiescenceGate();
  return *gate;
}

void QuiescenceGate::EnsureOnlineLocked() {
  if (!t_thread.online) {
    t_thread.registered = true;
    t_thread.online = true;
    if (online_++ == 0 && busy_hook_) busy_hook_();
  }
}

void QuiescenceGate::SetIdleHooks(void (*idle)(), void (*busy)()) {
  std::lock_guard lock(mu_);
  idle_hook_ = idle;
  busy_hook_ = busy;
}

void QuiescenceGate::Offline() {
  std::unique_lock lock(mu_);
  if (!t_thread.online) return;
  // A sync in progress counts this thread as quiescent: it may not leave yet.
  cv_.wait(lock, [&] { return !syncing_; });
  t_thread.online = false;
  if (--online_ == 0 && idle_hook_) idle_hook_();
  cv_.notify_all();
}

void QuiescenceGate::Online() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !syncing_; });
  EnsureOnlineLocked();
}

void QuiescenceGate::EnsureRegistered() {
  if (!t_thread.registered) Online();
}

int QuiescenceGate::online_threads() {
  std::lock_guard lock(mu_);
  return online_;
}

bool QuiescenceGate::WaitQuiescent(const std::function<bool()>& done,
                                   const std::function<bool()>& due,
                                   const std::function<void()>& work, uint64_t deadline_ns) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !syncing_; });
  EnsureOnlineLocked();
  ++quiescent_;
  cv_.notify_all();
  bool ok = false;
  for (;;) {
    if (!syncing_ && done()) {
      ok = true;
      break;
    }
    if (!syncing_ && quiescent_ == online_ && due()) {
      syncing_ = true;
      lock.unlock();
      work();
      lock.lock();
      syncing_ = false;
      ++generation_;
      cv_.notify_all();
      continue;
    }
    const uint64_t now = MonotonicNs();
    if (now >= deadline_ns && !syncing_) break;
    const uint64_t wake = std::min(deadline_ns, now + kRecheckNs);
    cv_.wait_for(lock, std::chrono::nanoseconds(wake > now ? wake - now : 0));
  }
  --quiescent_;
  return ok;
}

bool QuiescenceGate::RunQuiescent(const std::function<void()>& work, uint64_t deadline_ns) {
  bool ran = false;
  run_waiters_.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { n.fetch_sub(1, std::memory_order_relaxed); }
  } leave{run_waiters_};
  return WaitQuiescent([&] { return ran; }, [&] { return !ran; },
                       [&] {
                         work();
                         ran = true;
                       },
                       deadline_ns);
}

}  // namespace dsm
