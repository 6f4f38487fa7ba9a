#include "libdsm/contract/publish_protocol.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <ctime>

#include "libdsm/contract/clock.h"

namespace dsm {

namespace {

// futex words are 32 bits: the low half of `latest` holds the version's low
// bits, so it changes with every publish.
static_assert(std::endian::native == std::endian::little);
uint32_t* LatestLowHalf(AreaControl& area) { return reinterpret_cast<uint32_t*>(&area.latest); }

// Without futex_waitv, how long a wait on several areas sleeps on the first
// before it looks at the others.
constexpr uint64_t kVersionWaitFallbackSliceNs = 200 * 1000;

// Shared (not FUTEX_PRIVATE): waiters and publishers are different processes.
long Futex(uint32_t* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

void WakeVersionWaiters(AreaControl& area) {
  // seq_cst, after the store to `latest`: a waiter either counted itself before
  // (we wake it) or reads the new `latest` after (it does not sleep).
  if (area.version_waiters.load() != 0) Futex(LatestLowHalf(area), FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t* WordOf(std::atomic<uint32_t>& a) { return reinterpret_cast<uint32_t*>(&a); }

void SleepWhile(std::atomic<uint32_t>& word, uint32_t value, uint64_t ns) {
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  Futex(WordOf(word), FUTEX_WAIT, value, &ts);
}

// How long a reader sleeps at a time while dsmd writes the buffer it wants in
// place (the write is short; the sleep ends early when it does).
constexpr uint64_t kInPlaceWaitSliceNs = 1'000'000;

bool PinsBuffer(uint32_t pin, uint32_t buffer) {
  return (pin & 0xff) == buffer || ((pin >> 8) & 0xff) == buffer;
}

// The latest version's bookkeeping, once `target` holds it (before readers
// are woken).
void StoreLatest(AreaControl& area, uint32_t target, uint64_t version, uint64_t now_ns) {
  area.buffer_version[target].store(version);
  area.buffer_published_ns[target].store(now_ns);
  area.latest.store(PackLatest(version, target));
}

void CountPublish(AreaControl& area, uint64_t now_ns, size_t bytes_copied) {
  area.confirmed_ns.store(now_ns);
  area.publishes.fetch_add(1, std::memory_order_relaxed);
  area.bytes_published.fetch_add(bytes_copied, std::memory_order_relaxed);
}

// Gives every pin dsmd took for an in-place write of `buffer` back (yielded,
// as their readers left them), wakes those readers, and ends the write.
void GiveBackTakenPins(AreaControl& area) {
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    uint32_t w = area.reader_pin[s].load();
    if ((w & kPinTaken) == 0) continue;
    // (Fails only if the reader gave up waiting: PinExactOther.)
    if (area.reader_pin[s].compare_exchange_strong(w, (w & ~kPinTaken) | kPinYielded)) {
      Futex(WordOf(area.reader_pin[s]), FUTEX_WAKE, INT_MAX, nullptr);
    }
  }
  area.in_place_buffer.store(0);
  Futex(WordOf(area.in_place_buffer), FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace

uint32_t PinnedBuffers(const AreaControl& area) {
  uint32_t pinned = 0;
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    const uint32_t pins = area.reader_pin[s].load();
    for (uint32_t b : {pins & 0xff, (pins >> 8) & 0xff}) {
      if (b < kMaxReaderBuffers) pinned |= 1u << b;
    }
  }
  return pinned;
}

bool OnlyDaemonReads(const AreaControl& area) {
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    const uint32_t client = area.reader_client[s].load();
    if (client != 0 && client != kDaemonClientId) return false;
  }
  return true;
}

int ChoosePublishTarget(AreaControl& area) {
  const LatestVersion latest = UnpackLatest(area.latest.load());
  const int target = PickTargetBuffer(area.buffer_count, latest.buffer, PinnedBuffers(area));
  if (target < 0) {
    area.publishes_deferred.fetch_add(1, std::memory_order_relaxed);
    area.spare_wanted.store(1);
  }
  return target;
}

void CompletePublish(AreaControl& area, uint32_t target, uint64_t version, uint64_t now_ns,
                     size_t bytes_copied) {
  StoreLatest(area, target, version, now_ns);
  WakeVersionWaiters(area);
  CountPublish(area, now_ns, bytes_copied);
}

void CatchUpNextTarget(AreaControl& area, VersionPublisher& publisher, uint8_t* const* buffers,
                       uint32_t latest) {
  const int next = PickTargetBuffer(area.buffer_count, latest, PinnedBuffers(area));
  if (next < 0 || !publisher.CatchUpWorthwhile(static_cast<uint32_t>(next))) return;
  const size_t bytes =
      publisher.CatchUp(static_cast<uint32_t>(next), buffers[latest], buffers[next]);
  area.bytes_published.fetch_add(bytes, std::memory_order_relaxed);
  area.bytes_caught_up.fetch_add(bytes, std::memory_order_relaxed);
}

void WaitForNewerVersions(std::span<AreaControl* const> areas, std::span<const uint64_t> seen,
                          uint64_t timeout_ns) {
  const size_t n = std::min({areas.size(), seen.size(), kMaxVersionWaitAreas});
  if (n == 0) return;
  std::array<futex_waitv, kMaxVersionWaitAreas> waiters{};
  for (size_t i = 0; i < n; ++i) {
    areas[i]->version_waiters.fetch_add(1);
    // Shared (no FUTEX_PRIVATE_FLAG): the publisher is another process.
    waiters[i] = futex_waitv{.val = static_cast<uint32_t>(seen[i]),
                             .uaddr = reinterpret_cast<uintptr_t>(LatestLowHalf(*areas[i])),
                             .flags = FUTEX_32,
                             .__reserved = 0};
  }
  // The kernel compares each word with what we saw before it sleeps.
  const uint64_t until = MonotonicNs() + timeout_ns;
  const timespec deadline{static_cast<time_t>(until / 1'000'000'000),
                          static_cast<long>(until % 1'000'000'000)};
  if (syscall(SYS_futex_waitv, waiters.data(), static_cast<unsigned>(n), 0u, &deadline,
              CLOCK_MONOTONIC) < 0 &&
      errno == ENOSYS) {
    // A kernel older than 5.16: sleep on the first area, in short slices when
    // there are others to look at.
    const uint64_t slice = n == 1 ? timeout_ns : std::min(timeout_ns, kVersionWaitFallbackSliceNs);
    const timespec ts{static_cast<time_t>(slice / 1'000'000'000),
                      static_cast<long>(slice % 1'000'000'000)};
    Futex(LatestLowHalf(*areas[0]), FUTEX_WAIT, static_cast<uint32_t>(seen[0]), &ts);
  }
  for (size_t i = 0; i < n; ++i) areas[i]->version_waiters.fetch_sub(1);
}

void WakeStageWaiters(AreaControl& area) {
  Futex(reinterpret_cast<uint32_t*>(&area.stage_state), FUTEX_WAKE, INT_MAX, nullptr);
}

void WaitStageChange(AreaControl& area, uint32_t seen, uint64_t timeout_ns) {
  const timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
                    static_cast<long>(timeout_ns % 1'000'000'000)};
  Futex(reinterpret_cast<uint32_t*>(&area.stage_state), FUTEX_WAIT, seen, &ts);
}

bool PinLatest(AreaControl& area, uint32_t slot, uint32_t current, LatestVersion* out) {
  // A writer may pick a buffer as its target just before our pin becomes
  // visible; it then has already moved `latest` away from that buffer, so the
  // re-check fails and we try again. Bounded: a writer publishing faster than we
  // can pin makes us give up until the next attempt.
  // dsmd writing the latest buffer in place stores `in_place_buffer` before
  // it reads the pins; we store our pin before we read it: one of us sees the
  // other, and we wait for the write to end.
  constexpr int kAttempts = 16;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const uint64_t word = area.latest.load();
    const LatestVersion latest = UnpackLatest(word);
    area.reader_pin[slot].store(PinWord(current, latest.buffer));
    const uint32_t writing = area.in_place_buffer.load();
    if (writing == latest.buffer + 1) {
      SetPin(area, slot, current);
      SleepWhile(area.in_place_buffer, writing, kInPlaceWaitSliceNs);
      continue;
    }
    if (area.latest.load() == word) {
      *out = latest;
      return true;
    }
  }
  SetPin(area, slot, current);
  return false;
}

void SetPin(AreaControl& area, uint32_t slot, uint32_t current) {
  area.reader_pin[slot].store(PinWord(current, kNoBuffer));
}

void YieldPin(AreaControl& area, uint32_t slot) {
  const uint32_t w = area.reader_pin[slot].load();
  if ((w & 0xff) == kNoBuffer || (w & (kPinYielded | kPinTaken)) != 0) return;
  area.reader_pin[slot].store(w | kPinYielded);
}

bool ReclaimPin(AreaControl& area, uint32_t slot, uint64_t wait_ns) {
  const uint64_t deadline = MonotonicNs() + wait_ns;
  for (;;) {
    uint32_t w = area.reader_pin[slot].load();
    if ((w & (kPinYielded | kPinTaken)) == 0) return true;
    if ((w & kPinYielded) != 0) {
      if (area.reader_pin[slot].compare_exchange_strong(w, w & ~kPinYielded)) return true;
      continue;  // dsmd took it meanwhile
    }
    const uint64_t now = MonotonicNs();
    if (now >= deadline) return false;
    SleepWhile(area.reader_pin[slot], w, std::min(deadline - now, kInPlaceWaitSliceNs));
  }
}

bool PinExactOther(AreaControl& area, uint32_t slot, uint32_t current, LatestVersion* out) {
  uint32_t w = area.reader_pin[slot].load();
  if ((w & kPinTaken) == 0) return false;
  // The newest such version: the reader goes back as little as it can.
  uint32_t best = kNoBuffer;
  uint64_t best_version = 0;
  for (uint32_t b = 0; b < area.buffer_count; ++b) {
    const uint64_t version = area.buffer_version[b].load();
    if (b != current && version > best_version) {
      best = b;
      best_version = version;
    }
  }
  if (best == kNoBuffer) return false;
  // dsmd writes one buffer of the area at a time, and it holds our pin for
  // the write of `current`: `best` is not being written. MarkForWriting
  // zeroes buffer_version before it reads the pins, so once our pin is
  // stored, a later write into `best` sees it and goes elsewhere.
  if (!area.reader_pin[slot].compare_exchange_strong(w, PinWord(best, kNoBuffer))) return false;
  if (area.buffer_version[best].load() == best_version) {
    *out = LatestVersion{best_version, best};
    return true;
  }
  area.reader_pin[slot].store(kNoPins);  // not exact after all: hold nothing
  return false;
}

int TakeLatestInPlace(AreaControl& area) {
  const uint32_t latest = UnpackLatest(area.latest.load()).buffer;
  if (latest >= area.buffer_count) return -1;
  bool exact_other = false;
  for (uint32_t b = 0; b < area.buffer_count; ++b) {
    if (b != latest && area.buffer_version[b].load() != 0) exact_other = true;
  }
  if (!exact_other) return -1;
  // A look first, taking nothing: a reader that uses the buffer is seen
  // without the futex wakes of taking pins and giving them back.
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    const uint32_t w = area.reader_pin[s].load();
    if (PinsBuffer(w, latest) && (w & kPinYielded) == 0) return -1;
  }
  area.in_place_buffer.store(latest + 1);
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    uint32_t w = area.reader_pin[s].load();
    if (!PinsBuffer(w, latest)) continue;
    if ((w & kPinYielded) != 0 &&
        area.reader_pin[s].compare_exchange_strong(w, (w & ~kPinYielded) | kPinTaken)) {
      continue;
    }
    GiveBackTakenPins(area);  // a reader uses it (or just took its pin back)
    return -1;
  }
  area.buffer_version[latest].store(0);  // half written from now on
  return static_cast<int>(latest);
}

void EndInPlace(AreaControl& area, uint32_t buffer, uint64_t version, uint64_t now_ns,
                size_t bytes_copied) {
  StoreLatest(area, buffer, version, now_ns);
  GiveBackTakenPins(area);
  WakeVersionWaiters(area);
  CountPublish(area, now_ns, bytes_copied);
}

bool MarkForWriting(AreaControl& area, uint32_t buffer) {
  const uint64_t was = area.buffer_version[buffer].exchange(0);
  if ((PinnedBuffers(area) & (1u << buffer)) == 0) return true;
  area.buffer_version[buffer].store(was);
  return false;
}

void ReleaseDaemonPins(AreaControl& area) {
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    if (area.reader_client[s].load() == kDaemonClientId) area.reader_pin[s].store(kNoPins);
  }
}

void ExportChanges(AreaControl& area, uint64_t* logs, const LineSet& changed, uint64_t version) {
  const uint32_t index = area.export_index.load();
  uint64_t* log = logs + index * area.export_pages;
  // No locked OR: publishes of an area run one at a time (the quiescence
  // gate), and dsmd touches only the other log until this publish ends
  // (export_seq even again), so nothing else writes these words meanwhile.
  changed.ForEachPage([&](size_t page, uint64_t mask) {
    std::atomic_ref<uint64_t> word(log[page]);
    word.store(word.load(std::memory_order_relaxed) | mask, std::memory_order_relaxed);
  });
  area.export_version[index].store(version);
}

}  // namespace dsm
