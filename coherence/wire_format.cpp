#include "coherence/wire_format.h"

#include <cstddef>
#include <cstring>

namespace dsm::wire {

namespace {

constexpr size_t kHeaderBytes = sizeof(Header);

bool KnownType(uint8_t type) {
  return type >= static_cast<uint8_t>(FrameType::kData) &&
         type <= static_cast<uint8_t>(FrameType::kHelloReply);
}

DropReason CheckData(const Header& h, std::span<const uint8_t> payload, Frame* f) {
  if (h.frame_count == 0 || h.seq >= h.frame_count || h.run_count == 0) {
    return DropReason::kBadLayout;
  }
  const size_t runs_bytes = size_t{h.run_count} * sizeof(Run);
  if (runs_bytes > payload.size()) return DropReason::kBadLayout;
  const RunList runs(payload.data(), h.run_count);
  uint64_t next_free = 0;  // first line after the previous run
  uint64_t lines = 0;
  for (const Run r : runs) {
    const uint64_t end = uint64_t{r.first_line} + r.line_count;
    // Receivers may compute first_line + line_count in 32 bits: it must not wrap.
    if (r.line_count == 0 || r.first_line < next_free || end > UINT32_MAX) {
      return DropReason::kBadLayout;
    }
    next_free = end;
    lines += r.line_count;
  }
  // lines < 2^16 runs * 2^32: the product cannot overflow 64 bits.
  if (lines * kLineBytes != payload.size() - runs_bytes) return DropReason::kBadLayout;
  f->runs = runs;
  f->line_data = payload.subspan(runs_bytes);
  return DropReason::kNone;
}

DropReason CheckBody(const Header& h, std::span<const uint8_t> payload, Frame* f) {
  if (h.run_count != 0) return DropReason::kBadLayout;
  const size_t n = payload.size();
  bool ok = false;
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::kAck:
      ok = n % sizeof(SeqRange) == 0 && n / sizeof(SeqRange) <= kMaxMissingRanges;
      break;
    case FrameType::kHeartbeat:
      ok = n == sizeof(HeartbeatBody);
      break;
    case FrameType::kDirectory:  // frame `seq` of a round of `frame_count`
      ok = n % sizeof(DirectoryEntry) == 0 && h.seq < h.frame_count;
      break;
    case FrameType::kSubscribe:
      ok = n == 0;
      break;
    case FrameType::kHello:
    case FrameType::kHelloReply:
      ok = n == sizeof(HelloBody);
      break;
    case FrameType::kData:
      break;
  }
  if (!ok) return DropReason::kBadLayout;
  f->body = payload;
  return DropReason::kNone;
}

}  // namespace

const char* DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kNone:
      return "none";
    case DropReason::kTruncated:
      return "truncated";
    case DropReason::kOversized:
      return "oversized";
    case DropReason::kBadMagic:
      return "bad_magic";
    case DropReason::kBadVersion:
      return "bad_version";
    case DropReason::kBadType:
      return "bad_type";
    case DropReason::kBadChecksum:
      return "bad_checksum";
    case DropReason::kBadLayout:
      return "bad_layout";
    case DropReason::kUnknownHost:
      return "unknown_host";
    case DropReason::kUnknownArea:
      return "unknown_area";
    case DropReason::kOutOfRange:
      return "out_of_range";
    case DropReason::kStaleVersion:
      return "stale_version";
    case DropReason::kDuplicate:
      return "duplicate";
    case DropReason::kBusy:
      return "busy";
    case DropReason::kUnconfirmed:
      return "unconfirmed";
    case DropReason::kUnauthenticated:
      return "unauthenticated";
    case DropReason::kUnknownKey:
      return "unknown_key";
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

DropReason Decode(std::span<const uint8_t> bytes, const FrameSeal& seal, Frame* out) {
  if (bytes.size() < kHeaderBytes) return DropReason::kTruncated;
  Header h;
  std::memcpy(&h, bytes.data(), kHeaderBytes);
  // Magic and version before the lengths: traffic that is not ours, or from
  // another protocol version, is counted as such whatever its size.
  if (h.magic != kMagic) return DropReason::kBadMagic;
  if (h.protocol_version != kProtocolVersion) return DropReason::kBadVersion;
  const size_t header_bytes = kHeaderBytes + ((h.flags & kFlagAuthenticated) != 0 ? kTagBytes : 0);
  if (bytes.size() < header_bytes) return DropReason::kTruncated;
  const size_t available = bytes.size() - header_bytes;
  if (h.payload_bytes > available) return DropReason::kTruncated;
  if (h.payload_bytes < available) return DropReason::kOversized;
  if (!KnownType(h.type)) return DropReason::kBadType;
  const std::span<const uint8_t> payload = bytes.subspan(header_bytes);
  // Nothing beyond the header is read before the seal holds.
  if (const DropReason r = seal.Verify(h, bytes, payload); r != DropReason::kNone) return r;

  Frame f{};
  f.header = h;
  const DropReason r = static_cast<FrameType>(h.type) == FrameType::kData
                           ? CheckData(h, payload, &f)
                           : CheckBody(h, payload, &f);
  if (r == DropReason::kNone) *out = f;
  return r;
}

DropReason Decode(std::span<const uint8_t> bytes, Frame* out) {
  static const FrameSeal checksums;
  return Decode(bytes, checksums, out);
}

void Seal(uint8_t* frame, uint32_t payload_bytes, std::span<const uint8_t> tail) {
  static FrameSeal checksums;  // no keys: no state is touched
  checksums.Seal(frame, payload_bytes, tail);
}

DataFrameWriter::DataFrameWriter(size_t max_frame_bytes, const Header& header, FrameSeal* seal)
    : max_frame_bytes_(max_frame_bytes),
      header_(header),
      seal_(seal),
      header_bytes_(seal != nullptr ? seal->header_bytes() : kHeaderBytes) {
  header_.magic = kMagic;
  header_.protocol_version = kProtocolVersion;
  header_.type = static_cast<uint8_t>(FrameType::kData);
}

void DataFrameWriter::AddToPlan(std::span<const Run> runs, Plan* plan) {
  const uint32_t lines_before = plan->lines_before.empty() ? 0 : plan->lines_before.back();
  plan->frame_start.push_back(static_cast<uint32_t>(plan->runs.size()));
  plan->runs.insert(plan->runs.end(), runs.begin(), runs.end());
  uint32_t lines = 0;
  for (const Run& r : runs) lines += r.line_count;
  // lines_before holds the running total until EndPlan: entry i is the
  // count before frame i once the last entry is split off.
  plan->lines_before.push_back(lines_before + lines);
}

void DataFrameWriter::EndPlan(Plan* plan) {
  if (plan->runs.empty()) return;
  plan->frame_start.push_back(static_cast<uint32_t>(plan->runs.size()));
  plan->lines_before.insert(plan->lines_before.begin(), 0);
}

DataFrameWriter::Plan DataFrameWriter::MakePlan(const LineSet& lines) const {
  Plan plan;
  PackFrames(lines, [&](std::span<const Run> runs) { AddToPlan(runs, &plan); });
  EndPlan(&plan);
  return plan;
}

uint32_t DataFrameWriter::CountFrames(const LineSet& lines) const {
  uint32_t frames = 0;
  PackFrames(lines, [&](std::span<const Run>) { ++frames; });
  return frames;
}

void DataFrameWriter::WriteHeader(uint8_t* frame, uint16_t run_count, uint32_t seq,
                                  uint32_t frame_count) const {
  Header h = header_;
  h.run_count = run_count;
  h.seq = seq;
  h.frame_count = frame_count;
  std::memcpy(frame, &h, kHeaderBytes);
}

size_t DataFrameWriter::FillFrame(uint8_t* frame, std::span<const Run> runs, const uint8_t* content,
                                  uint32_t seq, uint32_t frame_count) const {
  WriteHeader(frame, static_cast<uint16_t>(runs.size()), seq, frame_count);
  uint8_t* at = frame + header_bytes_;
  std::memcpy(at, runs.data(), runs.size_bytes());
  at += runs.size_bytes();
  for (const Run& r : runs) {
    const size_t bytes = size_t{r.line_count} * kLineBytes;
    std::memcpy(at, content + size_t{r.first_line} * kLineBytes, bytes);
    at += bytes;
  }
  const size_t payload_bytes = static_cast<size_t>(at - frame) - header_bytes_;
  SealFrame(frame, static_cast<uint32_t>(payload_bytes));
  return header_bytes_ + payload_bytes;
}

size_t DataFrameWriter::FillHead(uint8_t* frame, std::span<const Run> runs,
                                 std::span<const uint8_t> tail, uint32_t seq,
                                 uint32_t frame_count) const {
  WriteHeader(frame, static_cast<uint16_t>(runs.size()), seq, frame_count);
  std::memcpy(frame + header_bytes_, runs.data(), runs.size_bytes());
  SealFrame(frame, static_cast<uint32_t>(runs.size_bytes()), tail);
  return header_bytes_ + runs.size_bytes();
}

void DataFrameWriter::SealFrame(uint8_t* frame, uint32_t payload_bytes,
                                std::span<const uint8_t> tail) const {
  if (seal_ != nullptr) {
    seal_->Seal(frame, payload_bytes, tail);
  } else {
    Seal(frame, payload_bytes, tail);
  }
}

}  // namespace dsm::wire
