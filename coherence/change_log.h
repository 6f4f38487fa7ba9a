// The change log of one area: which 64-byte lines were written since it was last
// cleared. One byte per line plus one summary byte per page of 64 lines, so that
// writer threads log with plain byte stores (no lost bits, no atomics) and a scan
// skips clean pages eight at a time. The byte layout is the one dsm_log() in
// include/dsm/dsm.h writes to directly.
#ifndef DSM_COHERENCE_CHANGE_LOG_H_
#define DSM_COHERENCE_CHANGE_LOG_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "coherence/constants.h"

namespace dsm {

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

  bool Test(size_t line) const { return line < lines_ && line_bytes_[line] != 0; }
  bool Empty() const;
  size_t CountLines() const;

  // this |= other. Both logs must cover the same number of lines. Cost follows
  // the number of dirty pages in `other`.
  void Merge(const ChangeLog& other);
  // Clears every mark. Cost follows the number of dirty pages.
  void Clear();

  // The marked pages in address order and each one's line mask.
  struct TakenPages {
    std::span<const uint32_t> pages;
    std::span<const uint64_t> masks;  // masks[i] is pages[i]'s
  };
  // Takes every mark, leaving the log empty; cost follows the number of
  // marked pages. The spans stay valid until the next call. Loads of several
  // pages' marks are in flight at once: a sparse version's marks are spread
  // over memory that the stores since evicted.
  TakenPages TakePages();

  // Raw bytes for dsm_log()'s inline fast path.
  uint8_t* line_bytes() { return line_bytes_.get(); }
  uint8_t* page_bytes() { return page_bytes_.get(); }

 private:
  // Index of the first marked page at or after `page`, or pages_ if none.
  size_t NextDirtyPage(size_t page) const;

  size_t area_bytes_;
  size_t lines_;
  size_t pages_;
  std::unique_ptr<uint8_t[]> line_bytes_;  // pages_ * kLinesPerPage, zero padded
  std::unique_ptr<uint8_t[]> page_bytes_;  // pages_ rounded up to 8, zero padded
  // TakePages()'s result, allocated on its first call.
  std::vector<uint32_t> taken_pages_;
  std::vector<uint64_t> taken_masks_;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_CHANGE_LOG_H_
