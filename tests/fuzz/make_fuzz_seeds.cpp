// Writes the seed corpus of frame_decoder_fuzz: one valid frame of each type
// and shape, built with the current wire format (so seeds never go stale when
// the header changes). Usage: make_fuzz_seeds OUTPUT_DIR
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/wire_format.h"

namespace {

using namespace dsm::wire;
using Bytes = std::vector<uint8_t>;

Header BaseHeader(FrameType type) {
  Header h{};
  h.magic = kMagic;
  h.protocol_version = kProtocolVersion;
  h.type = static_cast<uint8_t>(type);
  h.source_host = 1;
  h.dest_host = 2;
  h.area_index = 3;
  h.area_generation = 1;
  h.version = 10;
  h.base_version = 9;
  h.frame_count = 1;
  return h;
}

Bytes Sealed(const Header& h, const Bytes& payload) {
  Bytes f(sizeof(Header) + payload.size());
  std::memcpy(f.data(), &h, sizeof(Header));
  if (!payload.empty()) std::memcpy(f.data() + sizeof(Header), payload.data(), payload.size());
  Seal(f.data(), static_cast<uint32_t>(payload.size()));
  return f;
}

struct FirstFrames {
  uint8_t* Reserve(size_t max_bytes) {
    scratch.assign(max_bytes, 0);
    return scratch.data();
  }
  void Commit(size_t bytes) {
    frames.emplace_back(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(bytes));
  }
  std::vector<Bytes> frames;
  Bytes scratch;
};

// DATA frames of `lines` at `max_frame_bytes`, content = a byte pattern.
std::vector<Bytes> Data(const dsm::LineSet& lines, size_t max_frame_bytes, uint32_t flags) {
  Bytes content(lines.lines() * dsm::kLineBytes);
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<uint8_t>(i * 29 + 3);
  Header h = BaseHeader(FrameType::kData);
  h.flags = flags;
  FirstFrames sink;
  DataFrameWriter(max_frame_bytes, h).Write(lines, content.data(), sink);
  return sink.frames;
}

bool WriteFile(const std::string& dir, const char* name, const Bytes& bytes) {
  Frame out;
  if (Decode(bytes, &out) != DropReason::kNone) {
    std::fprintf(stderr, "seed %s does not decode\n", name);
    return false;
  }
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::perror(path.c_str());
    return false;
  }
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;

  dsm::LineSet one(4096);
  one.AddLines(5, 1);
  ok &= WriteFile(dir, "data_one_line.bin", Data(one, 1472, 0)[0]);

  dsm::LineSet runs(64 * 4096);
  for (size_t first : {0, 3, 9, 60, 200, 700}) runs.AddLines(first, first % 7 + 1);
  ok &= WriteFile(dir, "data_runs.bin", Data(runs, 1472, 0)[0]);

  dsm::LineSet split(16 * 4096);
  split.AddLines(10, 100);
  const std::vector<Bytes> parts = Data(split, 1472, 0);
  ok &= WriteFile(dir, "data_split_last.bin", parts.back());

  dsm::LineSet full(16 * 4096);
  full.AddAll();
  ok &= WriteFile(dir, "data_full_jumbo.bin", Data(full, 8972, kFlagFull)[0]);

  Bytes ranges(3 * sizeof(SeqRange));
  const SeqRange missing[] = {{0, 2}, {5, 1}, {9, 4}};
  std::memcpy(ranges.data(), missing, sizeof missing);
  ok &= WriteFile(dir, "ack_missing.bin", Sealed(BaseHeader(FrameType::kAck), ranges));
  ok &= WriteFile(dir, "ack_complete.bin", Sealed(BaseHeader(FrameType::kAck), {}));

  Bytes heartbeat(sizeof(HeartbeatBody), 0x11);
  ok &= WriteFile(dir, "heartbeat.bin", Sealed(BaseHeader(FrameType::kHeartbeat), heartbeat));

  Bytes entries(2 * sizeof(DirectoryEntry), 0);
  std::memcpy(entries.data(), "model/w", 8);
  std::memcpy(entries.data() + sizeof(DirectoryEntry), "model/b", 8);
  Header directory = BaseHeader(FrameType::kDirectory);
  directory.frame_count = 2;
  directory.seq = 1;
  ok &= WriteFile(dir, "directory.bin", Sealed(directory, entries));

  Bytes nonce(sizeof(HelloBody), 0x5a);
  ok &= WriteFile(dir, "hello.bin", Sealed(BaseHeader(FrameType::kHello), nonce));
  ok &= WriteFile(dir, "hello_reply.bin", Sealed(BaseHeader(FrameType::kHelloReply), nonce));
  ok &= WriteFile(dir, "subscribe.bin", Sealed(BaseHeader(FrameType::kSubscribe), {}));
  Header unsubscribe = BaseHeader(FrameType::kSubscribe);
  unsubscribe.flags = kFlagUnsubscribe;
  ok &= WriteFile(dir, "unsubscribe.bin", Sealed(unsubscribe, {}));
  return ok ? 0 : 1;
}
