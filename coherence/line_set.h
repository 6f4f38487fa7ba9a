// A set of 64-byte lines of an area, as one 64-bit mask per page of 64 lines
// plus the list of pages whose mask is non-zero. Used for the logs the library
// keeps for itself (what a reader buffer or a remote host has missed), where
// merging, iterating and clearing must cost in proportion to the pages touched,
// not to the area. (ChangeLog is the log dsm_log() writes, laid out for it.)
#ifndef DSM_COHERENCE_LINE_SET_H_
#define DSM_COHERENCE_LINE_SET_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coherence/constants.h"
#include "coherence/line_copy.h"

namespace dsm {

class LineSet {
 public:
  explicit LineSet(size_t area_bytes);

  size_t lines() const { return lines_; }
  size_t pages() const { return masks_.size(); }

  // Adds the lines of `mask` (bit i = line page * 64 + i) to page `page`.
  void AddMask(size_t page, uint64_t mask) {
    if (mask == 0) return;
    masks_[page] |= mask;
    uint64_t& listed = listed_[page / 64];
    const uint64_t bit = uint64_t{1} << (page % 64);
    if (!(listed & bit)) {
      listed |= bit;
      listed_pages_.push_back(static_cast<uint32_t>(page));
    }
  }
  // Adds lines [first, first + count), clipped to the area. A single line
  // (most runs of a sparse version) is one mask bit, inline.
  void AddLines(size_t first, size_t count) {
    if (count == 1 && first < lines_) {
      AddMask(first / kLinesPerPage, uint64_t{1} << (first % kLinesPerPage));
    } else {
      AddLineRange(first, count);
    }
  }
  // Adds runs of lines in address order (a range of anything with
  // first_line and line_count: LineRun, wire::Run). The usual run of a
  // sparse version, a line or a few within one page, costs no branch: the
  // page is written to the list whether it is new or not, and the list's
  // end moves only if it was.
  template <typename Runs>
  void AddRunsInOrder(const Runs& runs);
  void AddAll() { AddLines(0, lines_); }
  void Merge(const LineSet& other);
  // Removes the lines of `other`.
  void Subtract(const LineSet& other);
  // Empties one page (it stays in the page list until Clear; iteration skips it).
  void ClearPage(size_t page) { masks_[page] = 0; }

  uint64_t mask(size_t page) const { return masks_[page]; }
  bool Test(size_t line) const { return (masks_[line / kLinesPerPage] >> (line % kLinesPerPage)) & 1; }
  bool Empty() const;
  size_t CountLines() const;
  // Whether both hold the same lines (in time proportional to their pages).
  bool SameLines(const LineSet& other) const;
  void Clear();

  // Calls fn(page, mask) once for each page with a non-zero mask (in the order
  // pages were first added, not sorted).
  template <typename Fn>
  void ForEachPage(Fn&& fn) const {
    for (uint32_t page : listed_pages_) {
      if (masks_[page] != 0) fn(page, masks_[page]);
    }
  }
  // Calls fn(first_line, count) for each maximal run of lines, in address order.
  template <typename Fn>
  void ForEachRun(Fn&& fn) const;


 private:
  void AddLineRange(size_t first, size_t count);
  size_t lines_;
  std::vector<uint64_t> masks_;
  // Bit per page: it is in listed_pages_. Also how ForEachRun finds the
  // listed pages in address order without sorting or scanning every mask.
  std::vector<uint64_t> listed_;
  std::vector<uint32_t> listed_pages_;  // each once; masks may have become 0
};

// Copies the lines of `mask` in page `page` from src to dst (area-relative
// pointers) with CopyLines (line_copy.h: long runs, or every run with
// LineStores::kStreaming, with streaming stores, so StoreFence() before
// others may read them). Returns bytes copied.
size_t CopyPageLines(size_t page, uint64_t mask, const uint8_t* src, uint8_t* dst,
                     LineStores stores = LineStores::kByRunLength);

template <typename Runs>
void LineSet::AddRunsInOrder(const Runs& runs) {
  size_t listed = listed_pages_.size();
  const size_t count = runs.size();
  // Room for one new page per run; a run across pages takes the general
  // path, which lists its own pages.
  listed_pages_.resize(listed + count);
  size_t left = count;
  for (const auto& run : runs) {
    --left;
    const size_t first = run.first_line;
    const size_t n = run.line_count;
    const size_t page = first / kLinesPerPage;
    const size_t lo = first % kLinesPerPage;
    if (lo + n > kLinesPerPage || first + n > lines_ || n == 0) [[unlikely]] {
      listed_pages_.resize(listed);
      AddLines(first, n);
      listed = listed_pages_.size();
      listed_pages_.resize(listed + left);
      continue;
    }
    masks_[page] |= (n == kLinesPerPage ? ~uint64_t{0} : (uint64_t{1} << n) - 1) << lo;
    uint64_t& word = listed_[page / 64];
    const uint64_t bit = uint64_t{1} << (page % 64);
    listed_pages_[listed] = static_cast<uint32_t>(page);
    listed += (word & bit) == 0;
    word |= bit;
  }
  listed_pages_.resize(listed);
}

template <typename Fn>
void LineSet::ForEachRun(Fn&& fn) const {
  size_t run_first = 0, run_count = 0;
  for (size_t word = 0; word < listed_.size(); ++word) {
    for (uint64_t pages = listed_[word]; pages != 0; pages &= pages - 1) {
      const size_t page = word * 64 + static_cast<size_t>(__builtin_ctzll(pages));
      uint64_t m = masks_[page];
      while (m != 0) {
        const unsigned start = static_cast<unsigned>(__builtin_ctzll(m));
        const uint64_t shifted = m >> start;
        const unsigned len = shifted == ~uint64_t{0}
                                 ? 64 - start
                                 : static_cast<unsigned>(__builtin_ctzll(~shifted));
        const size_t first = page * kLinesPerPage + start;
        if (run_count != 0 && run_first + run_count == first) {
          run_count += len;
        } else {
          if (run_count != 0) fn(run_first, run_count);
          run_first = first;
          run_count = len;
        }
        m = len >= 64 ? 0 : m & ~(((uint64_t{1} << len) - 1) << start);
      }
    }
  }
  if (run_count != 0) fn(run_first, run_count);
}

}  // namespace dsm

#endif  // DSM_COHERENCE_LINE_SET_H_
