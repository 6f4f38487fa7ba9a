#include "coherence/line_diff.h"

#include <algorithm>
#include <cstring>

namespace dsm {

namespace {

// 64 bytes at once; the compiler turns the loop into vector compares.
bool LineDiffers(const uint8_t* a, const uint8_t* b) {
  uint64_t diff = 0;
  for (size_t i = 0; i < kLineBytes; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    diff |= x ^ y;
  }
  return diff != 0;
}

}  // namespace

size_t MarkChangedLines(const uint8_t* current, const uint8_t* published, size_t offset,
                        size_t bytes, ChangeLog* log) {
  const size_t area = log->area_bytes();
  if (bytes == 0 || offset >= area) return 0;
  const size_t end = std::min(area, offset + std::min(bytes, area - offset));
  uint8_t* bits = log->bits();
  uint8_t* summary = log->summary();
  size_t changed = 0;
  for (size_t line = offset / kLineBytes; line * kLineBytes < end; ++line) {
    const size_t at = line * kLineBytes;
    const bool differs = at + kLineBytes <= area
                             ? LineDiffers(current + at, published + at)
                             : std::memcmp(current + at, published + at, area - at) != 0;
    if (!differs) continue;
    dsm__mark_line(bits, summary, line);
    ++changed;
  }
  return changed;
}

}  // namespace dsm
