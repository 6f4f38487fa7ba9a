// DATA frames of one transfer for the coherence tests: written by
// wire::DataFrameWriter, as a sender frames them, and decoded with
// wire::Decode, as a receiver gets them.
#ifndef DSM_TESTS_COHERENCE_TRANSFER_FRAMES_H_
#define DSM_TESTS_COHERENCE_TRANSFER_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/wire_format.h"

namespace dsm::testing {

using Bytes = std::vector<uint8_t>;

// The receiving side's test area: 1000 lines and 40 bytes (the last line is
// partial), and frames of at most 8 lines (a whole-area transfer is 126).
inline constexpr size_t kTestArea = 1000 * kLineBytes + 40;
inline constexpr size_t kTestLines = 1001;
inline constexpr size_t kTestRounded = kTestLines * kLineBytes;
inline constexpr size_t kTestFrameBytes = sizeof(wire::Header) + sizeof(wire::Run) + 8 * kLineBytes;

// Every line of an area of `area` bytes.
LineSet All(size_t area = kTestArea);
// These lines of the test area.
LineSet Lines(std::initializer_list<size_t> lines);
// Seeded random content of the test area (zero past its end).
Bytes RandomContent(uint64_t seed);

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
                  bool full, uint32_t transfer_id, size_t frame_bytes = kTestFrameBytes);

}  // namespace dsm::testing

#endif  // DSM_TESTS_COHERENCE_TRANSFER_FRAMES_H_
