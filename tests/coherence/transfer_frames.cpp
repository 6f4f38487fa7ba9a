#include "tests/coherence/transfer_frames.h"

#include <gtest/gtest.h>

#include <utility>

namespace dsm::testing {

uint8_t* VectorSink::Reserve(size_t max_bytes) {
  scratch.assign(max_bytes, 0xcd);
  return scratch.data();
}

void VectorSink::Commit(size_t bytes) {
  frames.emplace_back(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(bytes));
}

wire::Frame Frames::operator[](size_t seq) const {
  wire::Frame f{};
  EXPECT_EQ(wire::Decode(bytes.at(seq), &f), wire::DropReason::kNone) << "frame " << seq;
  return f;
}

Frames MakeFrames(const LineSet& lines, const Bytes& content, uint64_t version, uint64_t base,
                  bool full, uint32_t transfer_id, size_t frame_bytes) {
  wire::Header h{};
  h.source_host = 1;
  h.dest_host = 2;
  h.area_index = 3;
  h.area_generation = 4;
  h.version = version;
  h.base_version = base;
  h.flags = full ? wire::kFlagFull : 0;
  h.transfer_id = transfer_id;
  wire::DataFrameWriter writer(frame_bytes, h);
  VectorSink sink;
  writer.Write(lines, content.data(), sink);
  return Frames{std::move(sink.frames)};
}

}  // namespace dsm::testing
