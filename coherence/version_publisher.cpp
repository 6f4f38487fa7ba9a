#include "coherence/version_publisher.h"

#include <array>
#include <bit>
#include <utility>

#include "coherence/line_copy.h"

namespace dsm {

int PickTargetBuffer(uint32_t buffer_count, uint32_t latest, uint32_t pinned_mask) {
  for (uint32_t step = 1; step < buffer_count; ++step) {
    const uint32_t b = (latest + step) % buffer_count;
    if ((pinned_mask & (1u << b)) == 0) return static_cast<int>(b);
  }
  return -1;
}

VersionPublisher::VersionPublisher(size_t area_bytes, uint32_t buffer_count, LineStores stores)
    : area_bytes_(area_bytes),
      stores_(stores),
      pending_(buffer_count, LineSet(area_bytes)),
      lacks_all_(buffer_count, false),
      written_(area_bytes) {}

size_t VersionPublisher::Publish(ChangeLog& dirty, uint32_t target, const uint8_t* src,
                                 uint8_t* dst, LineSet* changed) {
  // Pass 1: every buffer, the target included, learns what changed. Pass 2
  // copies what the target lacks in one tight loop: the copies of cold lines
  // dominate, and keeping them together lets the CPU overlap their misses.
  const ChangeLog::TakenPages taken = dirty.TakePages();
  last_version_lines_ = 0;
  for (size_t k = 0; k < taken.pages.size(); ++k) {
    for (LineSet& p : pending_) p.AddMask(taken.pages[k], taken.masks[k]);
    if (changed) changed->AddMask(taken.pages[k], taken.masks[k]);
    last_version_lines_ += static_cast<size_t>(std::popcount(taken.masks[k]));
  }
  return CopyPending(target, src, dst, stores_);
}

size_t VersionPublisher::PublishLines(const LineSet& dirty, uint32_t target, const uint8_t* src,
                                      uint8_t* dst) {
  for (LineSet& p : pending_) p.Merge(dirty);
  last_version_lines_ = dirty.CountLines();
  return CopyPending(target, src, dst, stores_);
}

size_t VersionPublisher::CopyLacking(const LineSet& written, uint32_t target, const uint8_t* latest,
                                     uint8_t* dst) {
  LineSet& todo = pending_[target];
  size_t copied = 0;
  todo.ForEachPage([&](size_t page, uint64_t mask) {
    copied += CopyPageLines(page, mask & ~written.mask(page), latest, dst, stores_);
  });
  todo.Clear();
  lacks_all_[target] = false;
  StoreFence();  // the streaming copies, and the caller's lines in `written`
  return copied;
}

void VersionPublisher::RecordPublished(const LineSet& written, uint32_t target, int forward) {
  for (uint32_t b = 0; b < pending_.size(); ++b) {
    if (static_cast<int>(b) == forward) {
      pending_[b].Subtract(written);
    } else if (b != target) {
      pending_[b].Merge(written);
    }
  }
  last_version_lines_ = written.CountLines();
}

size_t VersionPublisher::PublishRuns(std::span<const LineRun> runs, const uint8_t* bytes,
                                     uint32_t target, const uint8_t* latest, uint8_t* dst) {
  written_.Clear();
  written_.AddRunsInOrder(runs);
  ScatterRuns(runs, bytes, dst, LineStores::kByRunLength);
  size_t copied = 0;
  for (const LineRun& r : runs) copied += size_t{r.line_count} * kLineBytes;
  return copied + PublishInPlace(written_, target, latest, dst);
}

size_t VersionPublisher::PublishRunsInPlace(std::span<const LineRun> runs, const uint8_t* bytes,
                                            uint32_t target, uint8_t* dst) {
  ScatterRuns(runs, bytes, dst, LineStores::kByRunLength);
  StoreFence();
  for (uint32_t b = 0; b < pending_.size(); ++b) {
    if (b == target || lacks_all_[b]) continue;
    pending_[b].AddAll();
    lacks_all_[b] = true;
  }
  size_t copied = 0;
  for (const LineRun& r : runs) copied += size_t{r.line_count} * kLineBytes;
  last_version_lines_ = copied / kLineBytes;
  return copied;
}

void VersionPublisher::MarkAllPending() {
  for (LineSet& p : pending_) p.AddAll();
}

bool VersionPublisher::CatchUpWorthwhile(uint32_t target) const {
  const size_t lines = (area_bytes_ + kLineBytes - 1) / kLineBytes;
  return last_version_lines_ * kCatchUpMaxShare <= lines ||
         pending_[target].CountLines() * kCatchUpMaxShare <= lines;
}

size_t VersionPublisher::CopyPending(uint32_t target, const uint8_t* src, uint8_t* dst,
                                     LineStores stores) {
  LineSet& todo = pending_[target];
  size_t copied = 0;
  // The lines a buffer missed are scattered, and their source is often not
  // in the cache (a replica's frames arrive with streaming stores): each
  // copy would wait for its own miss. Lines of sparse pages are fetched
  // kAheadPages pages before they are copied, so the misses overlap (the
  // hardware prefetcher follows dense pages by itself).
  constexpr size_t kAheadPages = 8;
  constexpr int kSparseLines = 16;
  std::array<std::pair<size_t, uint64_t>, kAheadPages> ahead;
  size_t seen = 0;
  todo.ForEachPage([&](size_t page, uint64_t mask) {
    if (std::popcount(mask) <= kSparseLines) {
      for (uint64_t m = mask; m != 0; m &= m - 1) {
        __builtin_prefetch(src + (page * kLinesPerPage + static_cast<size_t>(std::countr_zero(m))) *
                                     kLineBytes);
      }
    }
    auto& slot = ahead[seen++ % kAheadPages];
    if (seen > kAheadPages) copied += CopyPageLines(slot.first, slot.second, src, dst, stores);
    slot = {page, mask};
  });
  for (size_t i = seen > kAheadPages ? seen - kAheadPages : 0; i < seen; ++i) {
    copied += CopyPageLines(ahead[i % kAheadPages].first, ahead[i % kAheadPages].second, src, dst,
                            stores);
  }
  todo.Clear();
  lacks_all_[target] = false;
  StoreFence();
  return copied;
}

}  // namespace dsm
