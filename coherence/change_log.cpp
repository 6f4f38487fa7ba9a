#include "coherence/change_log.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace dsm {

// dsm_log() sets bit n % 8 of byte n / 8; the log reads them as line n % 64
// of word n / 64.
static_assert(std::endian::native == std::endian::little, "the log's bytes are its words' bytes");
static_assert(kLinesPerPage == 64, "one 64-bit word per page");

namespace {
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void MarkLineBits(uint8_t* bits, uint8_t* summary, size_t first, size_t count) {
  if (count == 0) return;
  auto* words = reinterpret_cast<uint64_t*>(bits);
  const size_t end = first + count;
  for (size_t line = first; line < end;) {
    const size_t lo = line % kLinesPerPage;
    const size_t n = std::min(kLinesPerPage - lo, end - line);
    words[line / kLinesPerPage] |=
        n == kLinesPerPage ? ~uint64_t{0} : ((uint64_t{1} << n) - 1) << lo;
    line += n;
  }
  const size_t first_group = first / kLinesPerSummary;
  std::memset(summary + first_group, 1, (end - 1) / kLinesPerSummary - first_group + 1);
}

ChangeLog::ChangeLog(size_t area_bytes)
    : area_bytes_(area_bytes),
      lines_((area_bytes + kLineBytes - 1) / kLineBytes),
      pages_((lines_ + kLinesPerPage - 1) / kLinesPerPage),
      groups_((pages_ + kPagesPerSummary - 1) / kPagesPerSummary),
      words_(new uint64_t[groups_ * kPagesPerSummary]()),
      summary_(new uint8_t[RoundUp(groups_, 8) + 8]()) {}

void ChangeLog::MarkLines(size_t first, size_t count) {
  if (first >= lines_ || count == 0) return;
  MarkLineBits(bits(), summary(), first, std::min(count, lines_ - first));
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

size_t ChangeLog::NextMarkedGroup(size_t group) const {
  // Unaligned start: check single bytes up to the next multiple of 8.
  while (group < groups_ && (group & 7) != 0) {
    if (summary_[group]) return group;
    ++group;
  }
  // The summary is zero-padded to a multiple of 8, so 8-byte loads stay in bounds.
  while (group < groups_) {
    uint64_t w;
    std::memcpy(&w, summary_.get() + group, 8);
    if (w != 0) return std::min(group + static_cast<size_t>(std::countr_zero(w)) / 8, groups_);
    group += 8;
  }
  return groups_;
}

bool ChangeLog::Empty() const {
  for (size_t g = NextMarkedGroup(0); g < groups_; g = NextMarkedGroup(g + 1)) {
    for (size_t j = 0; j < kPagesPerSummary; ++j) {
      if (words_[g * kPagesPerSummary + j] != 0) return false;
    }
  }
  return true;
}

size_t ChangeLog::CountLines() const {
  size_t n = 0;
  for (size_t g = NextMarkedGroup(0); g < groups_; g = NextMarkedGroup(g + 1)) {
    for (size_t j = 0; j < kPagesPerSummary; ++j) {
      n += static_cast<size_t>(std::popcount(words_[g * kPagesPerSummary + j]));
    }
  }
  return n;
}

void ChangeLog::Absorb(ChangeLog& other) {
  const size_t groups = std::min(groups_, other.groups_);
  for (size_t g = other.NextMarkedGroup(0); g < groups; g = other.NextMarkedGroup(g + 1)) {
    uint64_t* dst = words_.get() + g * kPagesPerSummary;
    uint64_t* src = other.words_.get() + g * kPagesPerSummary;
    uint64_t any = 0;
    for (size_t j = 0; j < kPagesPerSummary; ++j) {
      dst[j] |= src[j];
      any |= src[j];
      src[j] = 0;
    }
    if (any != 0) summary_[g] = 1;
    other.summary_[g] = 0;
  }
}

void ChangeLog::EnsureTakenRoom() {
  // Room for a whole group past the last page: pages are written before they
  // are known to have marks.
  if (taken_pages_.size() != pages_ + kPagesPerSummary) {
    taken_pages_.resize(pages_ + kPagesPerSummary);
    taken_masks_.resize(pages_ + kPagesPerSummary);
  }
}

ChangeLog::TakenPages ChangeLog::TakePages() {
  EnsureTakenRoom();
  size_t n = 0;
  uint8_t* summary = summary_.get();
  for (size_t g = 0; g < groups_; g += 8) {
    uint64_t s;
    std::memcpy(&s, summary + g, 8);
    if (s == 0) continue;
    std::memset(summary + g, 0, 8);
    while (s != 0) {
      const unsigned byte = static_cast<unsigned>(std::countr_zero(s)) / 8;
      s &= ~(uint64_t{0xff} << (8 * byte));
      const size_t first_page = (g + byte) * kPagesPerSummary;
      uint64_t* words = words_.get() + first_page;
      // Without a branch per page: about half the pages of a sparse version
      // have no mark, in no order a predictor could learn. The slots past n
      // are overwritten by the next page.
      for (size_t j = 0; j < kPagesPerSummary; ++j) {
        taken_pages_[n] = static_cast<uint32_t>(first_page + j);
        taken_masks_[n] = words[j];
        n += words[j] != 0;
        words[j] = 0;
      }
    }
  }
  return {std::span<const uint32_t>(taken_pages_.data(), n),
          std::span<const uint64_t>(taken_masks_.data(), n)};
}

ChangeLog::TakenLines ChangeLog::TakeLines(size_t at_most) {
  TakenLines t;
  t.pages = TakePages();
  for (const uint64_t mask : t.pages.masks) t.count += static_cast<size_t>(std::popcount(mask));
  if (t.count > at_most || t.count == 0) return t;
  // Up to four lines per page are listed whether the page has them or not,
  // and the list's end moves by the page's count: no branch for the usual
  // page of a sparse version, which holds a line or two.
  constexpr size_t kUnrolled = 4;
  if (taken_lines_.size() < t.count + kUnrolled) taken_lines_.resize(t.count + kUnrolled);
  uint32_t* out = taken_lines_.data();
  for (size_t k = 0; k < t.pages.pages.size(); ++k) {
    uint64_t mask = t.pages.masks[k];
    const auto first = static_cast<uint32_t>(t.pages.pages[k] * kLinesPerPage);
    const auto count = static_cast<size_t>(std::popcount(mask));
    for (size_t i = 0; i < kUnrolled; ++i) {
      out[i] = first + static_cast<uint32_t>(std::countr_zero(mask));
      mask &= mask - 1;
    }
    for (size_t i = kUnrolled; i < count; ++i) {
      out[i] = first + static_cast<uint32_t>(std::countr_zero(mask));
      mask &= mask - 1;
    }
    out += count;
  }
  t.lines = std::span<const uint32_t>(taken_lines_.data(), t.count);
  return t;
}

void ChangeLog::Clear() {
  for (size_t g = NextMarkedGroup(0); g < groups_; g = NextMarkedGroup(g + 1)) {
    std::memset(words_.get() + g * kPagesPerSummary, 0, kPagesPerSummary * sizeof(uint64_t));
    summary_[g] = 0;
  }
}

}  // namespace dsm
