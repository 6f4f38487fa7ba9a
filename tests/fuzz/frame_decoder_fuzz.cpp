// libFuzzer target for wire::Decode (built with clang by tests/fuzz/meson.build).
//
// Each input is decoded twice: as it came, and copied (at a varying alignment)
// with payload_bytes and the checksum fixed up by Seal, so that mutations get
// past the checksum to the layout checks behind it. Accepted frames are walked
// the way a receiver would, and the lines of accepted DATA frames are encoded
// again with DataFrameWriter and must decode to the same lines and bytes.
// A broken promise calls __builtin_trap(), which libFuzzer reports as a crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/wire_format.h"

namespace {

using dsm::kLineBytes;
using dsm::LineSet;
using namespace dsm::wire;

// DATA frames whose lines end below this are re-encoded (bounds the work per input).
constexpr uint64_t kMaxRoundTripLines = 1024;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

bool Inside(std::span<const uint8_t> part, std::span<const uint8_t> whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

// Walks an accepted frame and checks what Decode promises about it.
void Walk(const Frame& f, std::span<const uint8_t> bytes) {
  Check(f.header.magic == kMagic && f.header.protocol_version == kProtocolVersion);
  Check(sizeof(Header) + f.header.payload_bytes == bytes.size());
  Check(Inside(f.line_data, bytes) && Inside(f.body, bytes));
  uint32_t sum = 0;  // read every byte, so ASan sees any view past the input
  for (uint8_t b : f.body) sum += b;
  if (f.header.type != static_cast<uint8_t>(FrameType::kData)) {
    Check(f.runs.empty() && f.line_data.empty());
    Check(f.body.size() == f.header.payload_bytes);
    return;
  }
  Check(f.header.seq < f.header.frame_count);
  Check(!f.runs.empty() && f.runs.size() == f.header.run_count);
  uint64_t next = 0;
  uint64_t lines = 0;
  for (const Run r : f.runs) {
    Check(r.line_count != 0 && r.first_line >= next);
    next = uint64_t{r.first_line} + r.line_count;
    Check(next <= UINT32_MAX);
    lines += r.line_count;
  }
  Check(lines * kLineBytes == f.line_data.size());
  for (uint8_t b : f.line_data) sum += b;
  volatile uint32_t sink = sum;
  (void)sink;
}

struct VectorSink {
  uint8_t* Reserve(size_t max_bytes) {
    scratch.assign(max_bytes, 0xcd);
    return scratch.data();
  }
  void Commit(size_t bytes) {
    Check(bytes <= scratch.size());
    frames.emplace_back(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(bytes));
  }
  std::vector<std::vector<uint8_t>> frames;
  std::vector<uint8_t> scratch;
};

// Applies a DATA frame to an area image; checks no line arrives twice.
void Apply(const Frame& f, LineSet& received, std::vector<uint8_t>& area) {
  size_t at = 0;
  for (const Run r : f.runs) {
    Check(uint64_t{r.first_line} + r.line_count <= received.lines());
    for (uint32_t i = 0; i < r.line_count; ++i) Check(!received.Test(r.first_line + i));
    received.AddLines(r.first_line, r.line_count);
    const size_t bytes = size_t{r.line_count} * kLineBytes;
    std::memcpy(area.data() + size_t{r.first_line} * kLineBytes, f.line_data.data() + at, bytes);
    at += bytes;
  }
}

void RoundTrip(const Frame& f) {
  const Run last = f.runs[f.runs.size() - 1];
  const uint64_t end = uint64_t{last.first_line} + last.line_count;
  if (end > kMaxRoundTripLines) return;
  const size_t area_bytes = static_cast<size_t>(end) * kLineBytes;
  LineSet lines(area_bytes);
  std::vector<uint8_t> content(area_bytes, 0);
  Apply(f, lines, content);

  // The input picks the frame size, so the packer sees many splits.
  const size_t max = DataFrameWriter::kMinFrameBytes + f.header.seq % 4096;
  const DataFrameWriter writer(max, f.header);
  Check(writer.ok());
  VectorSink sink;
  const uint32_t n = writer.Write(lines, content.data(), sink);
  Check(n == writer.CountFrames(lines) && n == sink.frames.size() && n != 0);

  LineSet received(area_bytes);
  std::vector<uint8_t> replica(area_bytes, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const std::vector<uint8_t>& bytes = sink.frames[i];
    Check(bytes.size() <= max);
    Frame g;
    Check(Decode(bytes, &g) == DropReason::kNone);
    Check(g.header.seq == i && g.header.frame_count == n);
    Check(g.header.version == f.header.version && g.header.flags == f.header.flags);
    Apply(g, received, replica);
  }
  Check(received.CountLines() == lines.CountLines());
  Check(replica == content);

  // A retransmission is byte-identical.
  VectorSink again;
  const uint32_t seq = f.header.seq % n;
  Check(writer.WriteRange(lines, content.data(), seq, 1, again) == 1);
  Check(again.frames[0] == sink.frames[seq]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Frame f;
  const std::span<const uint8_t> input(data, size);
  if (Decode(input, &f) == DropReason::kNone) Walk(f, input);

  if (size < sizeof(Header)) return 0;
  // The copy ends at the end of its allocation, so ASan still catches over-reads.
  const size_t shift = data[0] % 8;
  std::vector<uint8_t> buffer(shift + size);
  uint8_t* frame = buffer.data() + shift;
  std::memcpy(frame, data, size);
  Seal(frame, static_cast<uint32_t>(size - sizeof(Header)));
  const std::span<const uint8_t> sealed(frame, size);
  const DropReason r = Decode(sealed, &f);
  // Sealed: the lengths and checksum are right, so only these reasons remain.
  Check(r == DropReason::kNone || r == DropReason::kBadMagic || r == DropReason::kBadVersion ||
        r == DropReason::kBadType || r == DropReason::kBadLayout);
  if (r != DropReason::kNone) return 0;
  Walk(f, sealed);
  if (f.header.type == static_cast<uint8_t>(FrameType::kData)) RoundTrip(f);

  // The same frame sealed with a key (its tag after the header) verifies with
  // that key and decodes as the checksummed one did.
  static FrameSeal* const keyed = [] {
    FrameKey k;
    k.id = 9;
    k.secret.fill(0x5a);
    auto* s = new FrameSeal;  // one for the process
    s->SetKeys(std::span<const FrameKey>(&k, 1));
    return s;
  }();
  std::vector<uint8_t> tagged(size + kTagBytes);
  std::memcpy(tagged.data(), frame, sizeof(Header));
  std::memcpy(tagged.data() + sizeof(Header) + kTagBytes, frame + sizeof(Header), size - sizeof(Header));
  keyed->Seal(tagged.data(), static_cast<uint32_t>(size - sizeof(Header)));
  Frame g;
  Check(Decode(tagged, *keyed, &g) == DropReason::kNone);
  Check(g.header.type == f.header.type && g.body.size() == f.body.size() &&
        g.line_data.size() == f.line_data.size());
  Check(Decode(tagged, &g) == DropReason::kUnauthenticated);  // no keys here: not ours to judge
  return 0;
}
