#include "daemon/export_log_reader.h"

#include <algorithm>
#include <thread>

#include "libdsm/contract/clock.h"

namespace dsm {

bool ExportLogReader::Take(LineSet* into, uint64_t wait_ns) {
  if (untaken_ < 0) {
    untaken_ = static_cast<int>(area_.export_index.load());
    area_.export_index.store(1 - static_cast<uint32_t>(untaken_));
  }
  // Once export_seq is even, the publish that was running at the flip (and
  // may have ORed into the old log) has ended; later ones use the new log.
  const uint64_t deadline = MonotonicNs() + wait_ns;
  while ((area_.export_seq.load() & 1) != 0) {
    // A writer that died mid-publish never completes it: its last version is final.
    if (area_.state.load() != static_cast<uint32_t>(AreaState::kLive)) break;
    if (MonotonicNs() >= deadline) return false;
    std::this_thread::yield();
  }
  // No writer touches the old log any more: plain loads, and a store only
  // where a page has lines (most do not at small fractions).
  const uint32_t old = static_cast<uint32_t>(untaken_);
  std::atomic<uint64_t>* log = logs_ + old * area_.export_pages;
  for (uint64_t page = 0; page < area_.export_pages; ++page) {
    const uint64_t mask = log[page].load(std::memory_order_relaxed);
    if (mask == 0) continue;
    log[page].store(0, std::memory_order_relaxed);
    into->AddMask(page, mask);
  }
  taken_version_ = std::max(taken_version_, area_.export_version[old].load());
  untaken_ = -1;
  return true;
}

void ExportLogReader::AddCurrent(LineSet* into) const {
  const uint32_t current = area_.export_index.load();
  const std::atomic<uint64_t>* log = logs_ + current * area_.export_pages;
  for (uint64_t page = 0; page < area_.export_pages; ++page) {
    into->AddMask(page, log[page].load(std::memory_order_relaxed));
  }
}

}  // namespace dsm
