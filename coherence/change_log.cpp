#include "coherence/change_log.h"

#include <algorithm>
#include <bit>

#include "coherence/line_set.h"

namespace dsm {

namespace {
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

ChangeLog::ChangeLog(size_t area_bytes)
    : area_bytes_(area_bytes),
      lines_((area_bytes + kLineBytes - 1) / kLineBytes),
      pages_((lines_ + kLinesPerPage - 1) / kLinesPerPage),
      line_bytes_(new uint8_t[pages_ * kLinesPerPage]()),
      page_bytes_(new uint8_t[RoundUp(pages_, 8) + 8]()) {}

void ChangeLog::MarkLines(size_t first, size_t count) {
  if (first >= lines_ || count == 0) return;
  count = std::min(count, lines_ - first);
  std::memset(line_bytes_.get() + first, 1, count);
  const size_t first_page = first / kLinesPerPage;
  const size_t last_page = (first + count - 1) / kLinesPerPage;
  std::memset(page_bytes_.get() + first_page, 1, last_page - first_page + 1);
}

void ChangeLog::MarkBytes(size_t offset, size_t len) {
  // Clip to the area before adding: a byte past the end touches no line (not even
  // a partial last one), and offset + len must not wrap around.
  if (len == 0 || offset >= area_bytes_) return;
  len = std::min(len, area_bytes_ - offset);
  const size_t first = offset / kLineBytes;
  const size_t last = (offset + len - 1) / kLineBytes;
  MarkLines(first, last - first + 1);
}

size_t ChangeLog::NextDirtyPage(size_t page) const {
  // Unaligned start: check single bytes up to the next multiple of 8.
  while (page < pages_ && (page & 7) != 0) {
    if (page_bytes_[page]) return page;
    ++page;
  }
  // The summary is zero-padded to a multiple of 8, so 8-byte loads stay in bounds.
  while (page < pages_) {
    uint64_t w;
    std::memcpy(&w, page_bytes_.get() + page, 8);
    if (w != 0) {
      const size_t found = page + static_cast<size_t>(__builtin_ctzll(w)) / 8;
      return found < pages_ ? found : pages_;
    }
    page += 8;
  }
  return pages_;
}

bool ChangeLog::Empty() const { return NextDirtyPage(0) == pages_; }

size_t ChangeLog::CountLines() const {
  size_t n = 0;
  for (size_t page = NextDirtyPage(0); page < pages_; page = NextDirtyPage(page + 1)) {
    const uint8_t* bytes = line_bytes_.get() + page * kLinesPerPage;
    for (size_t i = 0; i < kLinesPerPage; ++i) n += bytes[i] != 0;
  }
  return n;
}

void ChangeLog::Merge(const ChangeLog& other) {
  const size_t pages = std::min(pages_, other.pages_);
  for (size_t page = other.NextDirtyPage(0); page < pages; page = other.NextDirtyPage(page + 1)) {
    uint8_t* dst = line_bytes_.get() + page * kLinesPerPage;
    const uint8_t* src = other.line_bytes_.get() + page * kLinesPerPage;
    for (size_t i = 0; i < kLinesPerPage; ++i) dst[i] |= src[i];
    page_bytes_[page] = 1;
  }
}

ChangeLog::TakenPages ChangeLog::TakePages() {
  if (taken_pages_.size() != pages_) {
    taken_pages_.resize(pages_);
    taken_masks_.resize(pages_);
  }
  // First the summary, eight pages per load: the list of marked pages.
  size_t n = 0;
  uint8_t* summary = page_bytes_.get();
  for (size_t page = 0; page < pages_; page += 8) {
    uint64_t w;
    std::memcpy(&w, summary + page, 8);
    if (w == 0) continue;
    std::memset(summary + page, 0, 8);
    while (w != 0) {
      const unsigned byte = static_cast<unsigned>(std::countr_zero(w)) / 8;
      taken_pages_[n++] = static_cast<uint32_t>(page + byte);
      w &= ~(uint64_t{0xff} << (8 * byte));
    }
  }
  // Then each page's marks, prefetched well ahead.
  constexpr size_t kAhead = 16;
  uint8_t* lines = line_bytes_.get();
  for (size_t k = 0; k < n; ++k) {
    if (k + kAhead < n) {
      __builtin_prefetch(lines + size_t{taken_pages_[k + kAhead]} * kLinesPerPage, 1);
    }
    uint8_t* marks = lines + size_t{taken_pages_[k]} * kLinesPerPage;
    taken_masks_[k] = LineBytesToMask(marks);
    std::memset(marks, 0, kLinesPerPage);
  }
  return {std::span<const uint32_t>(taken_pages_.data(), n),
          std::span<const uint64_t>(taken_masks_.data(), n)};
}

void ChangeLog::Clear() {
  for (size_t page = NextDirtyPage(0); page < pages_; page = NextDirtyPage(page + 1)) {
    std::memset(line_bytes_.get() + page * kLinesPerPage, 0, kLinesPerPage);
    page_bytes_[page] = 0;
  }
}

}  // namespace dsm
