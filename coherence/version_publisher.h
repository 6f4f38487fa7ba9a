// How a writer turns its change log into a new version of an area's reader
// copies. Each host keeps 2..4 reader buffers per area; readers map the latest
// one and pin it while they use it. A new version is written into a buffer that
// is neither the latest nor pinned, so no reader ever sees a buffer change under
// it. A buffer that missed earlier versions catches up in the same copy: each
// buffer carries a "pending" log of lines changed since its own version.
#ifndef DSM_COHERENCE_VERSION_PUBLISHER_H_
#define DSM_COHERENCE_VERSION_PUBLISHER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "coherence/change_log.h"

namespace dsm {

// The "latest" word of an area: version and buffer index in one atomic 64 bits.
struct LatestVersion {
  uint64_t version;
  uint32_t buffer;
};
inline constexpr uint64_t PackLatest(uint64_t version, uint32_t buffer) {
  return (version << 8) | (buffer & 0xff);
}
inline constexpr LatestVersion UnpackLatest(uint64_t word) {
  return {word >> 8, static_cast<uint32_t>(word & 0xff)};
}

// Picks the buffer the next version goes to: not `latest`, not in `pinned_mask`
// (bit i = some reader holds buffer i). Returns -1 when every spare is pinned.
// Prefers the buffer after `latest` in round-robin order, so buffers age evenly.
int PickTargetBuffer(uint32_t buffer_count, uint32_t latest, uint32_t pinned_mask);

// Copies every run of marked lines of `log` from src to dst (both area-sized).
// The last line of an area whose size is not a multiple of 64 is copied partially.
// Returns the bytes copied.
size_t CopyMarkedLines(const ChangeLog& log, const uint8_t* src, uint8_t* dst, size_t area_bytes);

class VersionPublisher {
 public:
  VersionPublisher(size_t area_bytes, uint32_t buffer_count);

  // Writes the next version into buffer `target`: copies the lines of `dirty`
  // plus those `target` missed, from the writer copy `src` into `dst` (the
  // target buffer's memory). Then `dirty` is cleared and every other buffer
  // remembers these lines as pending. Returns the bytes copied.
  size_t Publish(ChangeLog& dirty, uint32_t target, const uint8_t* src, uint8_t* dst);

  size_t area_bytes() const { return area_bytes_; }
  uint32_t buffer_count() const { return static_cast<uint32_t>(pending_.size()); }
  const ChangeLog& pending(uint32_t buffer) const { return *pending_[buffer]; }

 private:
  size_t area_bytes_;
  std::vector<std::unique_ptr<ChangeLog>> pending_;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_VERSION_PUBLISHER_H_
