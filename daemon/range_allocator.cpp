#include "daemon/range_allocator.h"

#include <algorithm>

namespace dsm {

RangeAllocator::RangeAllocator(uint64_t capacity) : capacity_(capacity), free_bytes_(capacity) {
  if (capacity > 0) free_[0] = capacity;
}

std::optional<uint64_t> RangeAllocator::Allocate(uint64_t bytes, uint64_t align) {
  if (bytes == 0 || align == 0 || (align & (align - 1)) != 0) return std::nullopt;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first;
    const uint64_t len = it->second;
    const uint64_t aligned = (start + align - 1) & ~(align - 1);
    if (aligned < start || aligned - start > len || len - (aligned - start) < bytes) continue;
    const uint64_t tail_start = aligned + bytes;
    const uint64_t tail_len = start + len - tail_start;
    free_.erase(it);
    if (aligned > start) free_[start] = aligned - start;
    if (tail_len > 0) free_[tail_start] = tail_len;
    free_bytes_ -= bytes;
    return aligned;
  }
  return std::nullopt;
}

void RangeAllocator::Release(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  free_bytes_ += bytes;
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    free_.erase(next);
  }
  free_[offset] = bytes;
}

uint64_t RangeAllocator::largest_free() const {
  uint64_t best = 0;
  for (const auto& [off, len] : free_) best = std::max(best, len);
  return best;
}

}  // namespace dsm
