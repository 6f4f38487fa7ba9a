#include "tests/coherence/transfer_frames.h"

#include <gtest/gtest.h>

#include <random>
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

LineSet All(size_t area) {
  LineSet s(area);
  s.AddAll();
  return s;
}

LineSet Lines(std::initializer_list<size_t> lines) {
  LineSet s(kTestArea);
  for (size_t l : lines) s.AddLines(l, 1);
  return s;
}

Bytes RandomContent(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(kTestRounded, 0);
  for (size_t i = 0; i < kTestArea; ++i) b[i] = static_cast<uint8_t>(rng());
  return b;
}

}  // namespace dsm::testing
