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
  area.buffer_version[target].store(version);
  area.buffer_published_ns[target].store(now_ns);
  area.latest.store(PackLatest(version, target));
  WakeVersionWaiters(area);
  area.confirmed_ns.store(now_ns);
  area.publishes.fetch_add(1, std::memory_order_relaxed);
  area.bytes_published.fetch_add(bytes_copied, std::memory_order_relaxed);
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
  constexpr int kAttempts = 16;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const uint64_t word = area.latest.load();
    const LatestVersion latest = UnpackLatest(word);
    area.reader_pin[slot].store(PinWord(current, latest.buffer));
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
