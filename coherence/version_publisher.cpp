#include "coherence/version_publisher.h"

#include <algorithm>
#include <cstring>

namespace dsm {

int PickTargetBuffer(uint32_t buffer_count, uint32_t latest, uint32_t pinned_mask) {
  for (uint32_t step = 1; step < buffer_count; ++step) {
    const uint32_t b = (latest + step) % buffer_count;
    if ((pinned_mask & (1u << b)) == 0) return static_cast<int>(b);
  }
  return -1;
}

size_t CopyMarkedLines(const ChangeLog& log, const uint8_t* src, uint8_t* dst, size_t area_bytes) {
  size_t copied = 0;
  log.ForEachRun([&](size_t first, size_t count) {
    const size_t offset = first * kLineBytes;
    const size_t bytes = std::min(count * kLineBytes, area_bytes - offset);
    std::memcpy(dst + offset, src + offset, bytes);
    copied += bytes;
  });
  return copied;
}

VersionPublisher::VersionPublisher(size_t area_bytes, uint32_t buffer_count)
    : area_bytes_(area_bytes) {
  for (uint32_t i = 0; i < buffer_count; ++i) {
    pending_.push_back(std::make_unique<ChangeLog>(area_bytes));
  }
}

size_t VersionPublisher::Publish(ChangeLog& dirty, uint32_t target, const uint8_t* src,
                                 uint8_t* dst) {
  ChangeLog& todo = *pending_[target];
  todo.Merge(dirty);
  const size_t copied = CopyMarkedLines(todo, src, dst, area_bytes_);
  todo.Clear();
  for (uint32_t b = 0; b < pending_.size(); ++b) {
    if (b != target) pending_[b]->Merge(dirty);
  }
  dirty.Clear();
  return copied;
}

}  // namespace dsm
