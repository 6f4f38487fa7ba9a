// Process-local quiescence: sync work (publishing a version, moving a replica
// to a newer one) may run only while no thread of this process is inside an
// area. Threads announce quiescent points (dsm_service, dsm_wait_version); the
// work runs, on one of them, once every online thread has arrived. Threads that
// never called into the gate, or went offline, are not waited for. Waits are
// bounded: if a thread does not arrive, the sync is skipped and retried later.
#ifndef DSM_LIBDSM_QUIESCENCE_GATE_H_
#define DSM_LIBDSM_QUIESCENCE_GATE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace dsm {

class QuiescenceGate {
 public:
  // The process's gate. Never destroyed, so thread-exit hooks can always use it.
  static QuiescenceGate& Instance();

  // Waits (as a quiescent thread) until `done()` holds or `deadline_ns` passes.
  // Meanwhile, whenever every online thread is quiescent and `due()` holds, runs
  // `work()` on this thread. Returns whether `done()` held. `done` and `due` are
  // called with the gate's lock held and must be cheap.
  bool WaitQuiescent(const std::function<bool()>& done, const std::function<bool()>& due,
                     const std::function<void()>& work, uint64_t deadline_ns);

  // Runs `work` once at a point where all online threads are quiescent, waiting
  // at most until `deadline_ns`. Returns false if that point was not reached.
  bool RunQuiescent(const std::function<void()>& work, uint64_t deadline_ns);

  void Offline();  // the calling thread stops being waited for
  void Online();   // ... and is waited for again
  // Registers the calling thread (online) unless it already is. Cheap after the
  // first call; a thread must be registered before a sync can be unsafe for it.
  // A registered thread that went offline stays offline; entering the gate
  // (dsm_service, dsm_wait_version) brings it online again.
  void EnsureRegistered();
  // Whether some thread waits in RunQuiescent for the others to check in, so a
  // thread at a quiescent point should join even if it has nothing due. Lock-free.
  bool SomeoneWaiting() const { return run_waiters_.load(std::memory_order_relaxed) > 0; }

  // Hooks called with the gate's lock held: `idle` when the last online
  // thread goes offline (no thread reads an area now), `busy` when a thread
  // comes online again, before it can. The session yields and takes back
  // the pins of the replicas it reads (ReaderArea::YieldReplicas).
  void SetIdleHooks(void (*idle)(), void (*busy)());

  // For diagnostics and tests.
  int online_threads();

 private:
  QuiescenceGate() = default;
  void EnsureOnlineLocked();

  std::mutex mu_;
  std::condition_variable cv_;
  int online_ = 0;      // registered threads that are online
  int quiescent_ = 0;   // of those, how many are inside the gate now
  std::atomic<int> run_waiters_{0};  // threads inside RunQuiescent
  bool syncing_ = false;
  uint64_t generation_ = 0;  // completed sync runs
  void (*idle_hook_)() = nullptr;
  void (*busy_hook_)() = nullptr;
};

}  // namespace dsm

#endif  // DSM_LIBDSM_QUIESCENCE_GATE_H_
