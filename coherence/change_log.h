// The change log of one area: which 64-byte lines were written since it was
// last taken. One bit per line, in one 64-bit word per page of 64 lines, plus
// one summary byte per 8 pages (one 64-byte line of words), so that a publish
// reads the few lines of bits that hold marks and a sparse version costs
// little. Bits are set with plain stores: a log has one writing thread at a
// time (each writer thread of an area logs into its own, and a publish
// gathers them). The layout is the one dsm_log() in include/dsm/dsm.h writes
// to directly.
#ifndef DSM_COHERENCE_CHANGE_LOG_H_
#define DSM_COHERENCE_CHANGE_LOG_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "coherence/constants.h"

namespace dsm {

// Pages of 64 lines behind one summary byte.
inline constexpr size_t kPagesPerSummary = kLinesPerSummary / kLinesPerPage;

// Marks lines [first, first + count) in a log laid out as dsm_log_cache
// describes (`bits`: a bit per line; `summary`: a byte per kLinesPerSummary
// lines). The caller has checked the range.
void MarkLineBits(uint8_t* bits, uint8_t* summary, size_t first, size_t count);

// Whether TakePages and ListLines use AVX-512 where the CPU has it (the
// default) or their portable forms; returns the previous choice. For tests
// that compare the two; not thread safe.
bool UseAvx512LogScans(bool on);

class ChangeLog {
 public:
  // A log for an area of `area_bytes` bytes (a partial last line counts as a line).
  explicit ChangeLog(size_t area_bytes);

  ChangeLog(const ChangeLog&) = delete;
  ChangeLog& operator=(const ChangeLog&) = delete;

  size_t area_bytes() const { return area_bytes_; }
  size_t lines() const { return lines_; }
  size_t pages() const { return pages_; }

  // Marks lines [first, first + count). Lines past the end are ignored.
  void MarkLines(size_t first, size_t count);
  // Marks every line touched by the byte range [offset, offset + len). Bytes past
  // the end of the area are ignored.
  void MarkBytes(size_t offset, size_t len);

  bool Test(size_t line) const {
    return line < lines_ && (words_[line / kLinesPerPage] >> (line % kLinesPerPage) & 1) != 0;
  }
  bool Empty() const;
  size_t CountLines() const;

  // this |= other, leaving `other` empty (a thread's log gathered into the
  // publish's). Both logs must cover the same number of lines. Cost follows
  // the number of summary bytes set in `other`.
  void Absorb(ChangeLog& other);
  // Clears every mark. Cost follows the number of summary bytes set.
  void Clear();

  // The marked pages in address order and each one's line mask.
  struct TakenPages {
    std::span<const uint32_t> pages;
    std::span<const uint64_t> masks;  // masks[i] is pages[i]'s
    size_t lines = 0;                 // marked lines in all of them
  };
  // Takes every mark, leaving the log empty; cost follows the number of
  // summary bytes set. The spans stay valid until the next call.
  TakenPages TakePages();

  // Lists the lines of `pages` (with their `masks`) at `out`, in address
  // order, and returns how many. `out` needs room for kListSlack more
  // entries than that: a page's line numbers are written sixteen (or four)
  // at a time whether the page has them or not, so the usual page of a
  // sparse version, with a line or two, costs no branch.
  static constexpr size_t kListSlack = 64;
  static size_t ListLines(std::span<const uint32_t> pages, std::span<const uint64_t> masks,
                          uint32_t* out);
  // Room for a list of `lines` lines plus `slack` entries, kept with the log
  // so that a publish allocates nothing.
  uint32_t* ListRoom(size_t lines, size_t slack);

  // Raw arrays for dsm_log()'s inline fast path (dsm_log_cache).
  uint8_t* bits() { return reinterpret_cast<uint8_t*>(words_.get()); }
  uint8_t* summary() { return summary_.get(); }

 private:
  void EnsureTakenRoom();
  // Index of the first set summary byte at or after `group`, or groups_ if none.
  size_t NextMarkedGroup(size_t group) const;

  size_t area_bytes_;
  size_t lines_;
  size_t pages_;
  size_t groups_;                       // summary bytes in use
  std::unique_ptr<uint64_t[]> words_;   // groups_ * kPagesPerSummary, zero padded
  std::unique_ptr<uint8_t[]> summary_;  // groups_ rounded up to 8, zero padded
  // TakePages()'s result, allocated on its first call.
  std::vector<uint32_t> taken_pages_;
  std::vector<uint64_t> taken_masks_;
  std::vector<uint32_t> taken_lines_;  // ListRoom()'s list
};

}  // namespace dsm

#endif  // DSM_COHERENCE_CHANGE_LOG_H_
