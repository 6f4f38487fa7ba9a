// First-fit allocator of aligned ranges inside [0, capacity). dsmd uses one for
// its slice of the virtual region and one for the backing memory.
#ifndef DSM_DAEMON_RANGE_ALLOCATOR_H_
#define DSM_DAEMON_RANGE_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>

namespace dsm {

class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t capacity);

  // Returns the offset of a free range of `bytes` aligned to `align` (a power of
  // two), or nothing if no free range is large enough.
  std::optional<uint64_t> Allocate(uint64_t bytes, uint64_t align);
  // Returns a range obtained from Allocate(); neighbours are merged.
  void Release(uint64_t offset, uint64_t bytes);

  uint64_t capacity() const { return capacity_; }
  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t largest_free() const;

 private:
  uint64_t capacity_;
  uint64_t free_bytes_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, non-adjacent
};

}  // namespace dsm

#endif  // DSM_DAEMON_RANGE_ALLOCATOR_H_
