#include "coherence/line_set.h"

#include <algorithm>
#include <cstring>

#include "coherence/line_copy.h"

namespace dsm {

LineSet::LineSet(size_t area_bytes)
    : lines_((area_bytes + kLineBytes - 1) / kLineBytes),
      masks_((lines_ + kLinesPerPage - 1) / kLinesPerPage, 0),
      listed_((masks_.size() + 63) / 64, 0) {}

void LineSet::AddLineRange(size_t first, size_t count) {
  if (first >= lines_ || count == 0) return;
  count = std::min(count, lines_ - first);
  const size_t last = first + count - 1;
  for (size_t page = first / kLinesPerPage; page <= last / kLinesPerPage; ++page) {
    const size_t lo = std::max(first, page * kLinesPerPage) - page * kLinesPerPage;
    const size_t hi = std::min(last, page * kLinesPerPage + kLinesPerPage - 1) - page * kLinesPerPage;
    const uint64_t mask = hi - lo == 63 ? ~uint64_t{0} : ((uint64_t{1} << (hi - lo + 1)) - 1) << lo;
    AddMask(page, mask);
  }
}

void LineSet::Merge(const LineSet& other) {
  other.ForEachPage([&](size_t page, uint64_t mask) { AddMask(page, mask); });
}

void LineSet::Subtract(const LineSet& other) {
  other.ForEachPage([&](size_t page, uint64_t mask) { masks_[page] &= ~mask; });
}

size_t LineSet::CountLines() const {
  size_t n = 0;
  ForEachPage([&](size_t, uint64_t mask) { n += static_cast<size_t>(__builtin_popcountll(mask)); });
  return n;
}

bool LineSet::SameLines(const LineSet& other) const {
  if (other.lines_ != lines_) return false;
  for (uint32_t page : listed_pages_) {
    if (masks_[page] != other.masks_[page]) return false;
  }
  for (uint32_t page : other.listed_pages_) {
    if (masks_[page] != other.masks_[page]) return false;
  }
  return true;
}

bool LineSet::Empty() const {
  // Stops at the first page with a line: the receiver asks once per frame.
  for (uint32_t page : listed_pages_) {
    if (masks_[page] != 0) return false;
  }
  return true;
}

void LineSet::Clear() {
  for (uint32_t page : listed_pages_) {
    masks_[page] = 0;
    listed_[page / 64] = 0;
  }
  listed_pages_.clear();
}

size_t CopyPageLines(size_t page, uint64_t mask, const uint8_t* src, uint8_t* dst,
                     LineStores stores) {
  const size_t base = page * kLinesPerPage * kLineBytes;
  if (mask == ~uint64_t{0}) {
    CopyLines(dst + base, src + base, kLinesPerPage * kLineBytes, stores);
    return kLinesPerPage * kLineBytes;
  }
  size_t copied = 0;
  while (mask != 0) {
    const unsigned start = static_cast<unsigned>(__builtin_ctzll(mask));
    const uint64_t shifted = mask >> start;
    const unsigned len = static_cast<unsigned>(__builtin_ctzll(~shifted));  // shifted != ~0 here
    const size_t off = base + size_t{start} * kLineBytes;
    CopyLines(dst + off, src + off, size_t{len} * kLineBytes, stores);
    copied += size_t{len} * kLineBytes;
    mask &= ~(((uint64_t{1} << len) - 1) << start);
  }
  return copied;
}

}  // namespace dsm
