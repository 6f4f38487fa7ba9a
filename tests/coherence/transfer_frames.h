// DATA frames of one transfer for the coherence tests: written by
// wire::DataFrameWriter, as a sender frames them, and decoded with
// wire::Decode, as a receiver gets them.
#ifndef DSM_TESTS_COHERENCE_TRANSFER_FRAMES_H_
#define DSM_TESTS_COHERENCE_TRANSFER_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/wire_format.h"

namespace dsm::testing {

using Bytes = std::vector<uint8_t>;

// Collects the frames a DataFrameWriter writes.
struct VectorSink {
  uint8_t* Reserve(size_t max_bytes);
  void Commit(size_t bytes);
  std::vector<Bytes> frames;
  Bytes scratch;
};

// The frames of one transfer; each decoded Frame's views point into `bytes`.
struct Frames {
  std::vector<Bytes> bytes;
  // Frame `seq`, decoded (a test failure if it does not decode).
  wire::Frame operator[](size_t seq) const;
  size_t size() const { return bytes.size(); }
};

// Frames of `lines` of `content` (whole lines), from host 1 to host 2, of
// area 3 generation 4.
Frames MakeFrames(const LineSet& lines, const Bytes& content, uint64_t version, uint64_t base,
                  bool full, uint32_t transfer_id, size_t frame_bytes);

}  // namespace dsm::testing

#endif  // DSM_TESTS_COHERENCE_TRANSFER_FRAMES_H_
