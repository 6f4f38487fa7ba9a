#include "coherence/wire_format.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace dsm::wire {

// In dsm::wire itself, so that argument-dependent lookup finds them from gtest
// and from std::vector's operator==.
bool operator==(const wire::Run& a, const wire::Run& b) {
  return a.first_line == b.first_line && a.line_count == b.line_count;
}
std::ostream& operator<<(std::ostream& os, const wire::Run& r) {
  return os << "{" << r.first_line << ", " << r.line_count << "}";
}
std::ostream& operator<<(std::ostream& os, DropReason r) { return os << DropReasonName(r); }

namespace {

static_assert(std::forward_iterator<RunList::Iterator>);

using Bytes = std::vector<uint8_t>;

// Ethernet (14) + IPv4 (20) + UDP (8) around every frame.
constexpr size_t kEncapsulationBytes = 42;

// Collects frames; Reserve hands out a buffer full of junk, so a byte the writer
// forgets to write shows up as a checksum or content mismatch.
struct VectorSink {
  uint8_t* Reserve(size_t max_bytes) {
    ++reserves;
    last_reserve_bytes = max_bytes;
    if (fail_after >= 0 && frames.size() >= static_cast<size_t>(fail_after)) return nullptr;
    scratch.assign(max_bytes, 0xcd);
    return scratch.data();
  }
  void Commit(size_t bytes) {
    EXPECT_LE(bytes, scratch.size());
    frames.emplace_back(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(bytes));
  }
  std::vector<Bytes> frames;
  Bytes scratch;
  int reserves = 0;
  size_t last_reserve_bytes = 0;
  int fail_after = -1;  // Reserve returns nullptr once this many frames are committed
};

// A sink that takes tails by reference, as the daemon's does: records where
// each tail was (it must be the content itself, not a copy) and joins it to
// its head to give the frame the wire would carry.
struct TailRecordingSink : VectorSink {
  void CommitWithTail(size_t bytes, std::span<const uint8_t> tail) {
    EXPECT_LE(bytes + tail.size(), scratch.size());
    Bytes frame(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(bytes));
    frame.insert(frame.end(), tail.begin(), tail.end());
    frames.push_back(std::move(frame));
    tails.push_back(tail);
  }
  std::vector<std::span<const uint8_t>> tails;
};
static_assert(TailSink<TailRecordingSink>);
static_assert(!TailSink<VectorSink>);

Header BaseHeader(FrameType type) {
  Header h{};
  h.magic = kMagic;
  h.protocol_version = kProtocolVersion;
  h.type = static_cast<uint8_t>(type);
  h.source_host = 3;
  h.dest_host = 7;
  h.area_index = 17;
  h.area_generation = 5;
  h.version = 42;
  h.base_version = 40;
  h.seq = 0;
  h.frame_count = 1;
  return h;
}

// The header a DataFrameWriter gets: everything else is the writer's to fill.
Header WriterHeader() {
  Header h{};
  h.source_host = 3;
  h.dest_host = kAllHosts;
  h.area_index = 17;
  h.area_generation = 5;
  h.version = 42;
  h.base_version = 40;
  return h;
}

Bytes MakeFrame(const Header& h, const Bytes& payload) {
  Bytes f(sizeof(Header) + payload.size());
  std::memcpy(f.data(), &h, sizeof(Header));
  if (!payload.empty()) std::memcpy(f.data() + sizeof(Header), payload.data(), payload.size());
  Seal(f.data(), static_cast<uint32_t>(payload.size()));
  return f;
}

// A DATA frame with `runs` and `line_bytes` bytes of line data (not necessarily
// what the runs need: the layout tests make them disagree).
Bytes MakeData(const std::vector<wire::Run>& runs, size_t line_bytes,
               Header h = BaseHeader(FrameType::kData)) {
  h.run_count = static_cast<uint16_t>(runs.size());
  Bytes payload(runs.size() * sizeof(wire::Run) + line_bytes);
  if (!runs.empty()) std::memcpy(payload.data(), runs.data(), runs.size() * sizeof(wire::Run));
  for (size_t i = 0; i < line_bytes; ++i)
    payload[runs.size() * sizeof(wire::Run) + i] = static_cast<uint8_t>(i * 31 + 7);
  return MakeFrame(h, payload);
}

Bytes ValidData() { return MakeData({{10, 2}, {20, 1}}, 3 * kLineBytes); }

template <typename T>
void Poke(Bytes& f, size_t offset, T value) {
  std::memcpy(f.data() + offset, &value, sizeof(T));
}
template <typename T>
T Peek(const Bytes& f, size_t offset) {
  T value;
  std::memcpy(&value, f.data() + offset, sizeof(T));
  return value;
}
void Reseal(Bytes& f) { Seal(f.data(), static_cast<uint32_t>(f.size() - sizeof(Header))); }

DropReason DecodeBytes(const Bytes& f, Frame* out = nullptr) {
  Frame scratch;
  return Decode(std::span<const uint8_t>(f.data(), f.size()), out ? out : &scratch);
}

std::vector<wire::Run> RunsOf(const Frame& f) {
  return std::vector<wire::Run>(f.runs.begin(), f.runs.end());
}

// --- Layout -------------------------------------------------------------------------

TEST(WireLayoutTest, FieldOffsetsAndSizesAreTheDocumentedOnes) {
  // docs/wire-format.md has this table: change both together. (The bodies of
  // HEARTBEAT and DIRECTORY are checked by sizeof, so they may grow.)
  EXPECT_EQ(sizeof(Header), 64u);
  EXPECT_EQ(offsetof(Header, magic), 0u);
  EXPECT_EQ(offsetof(Header, protocol_version), 4u);
  EXPECT_EQ(offsetof(Header, type), 5u);
  EXPECT_EQ(offsetof(Header, source_host), 6u);
  EXPECT_EQ(offsetof(Header, dest_host), 8u);
  EXPECT_EQ(offsetof(Header, run_count), 10u);
  EXPECT_EQ(offsetof(Header, area_index), 12u);
  EXPECT_EQ(offsetof(Header, area_generation), 16u);
  EXPECT_EQ(offsetof(Header, version), 20u);
  EXPECT_EQ(offsetof(Header, base_version), 28u);
  EXPECT_EQ(offsetof(Header, seq), 36u);
  EXPECT_EQ(offsetof(Header, frame_count), 40u);
  EXPECT_EQ(offsetof(Header, payload_bytes), 44u);
  EXPECT_EQ(offsetof(Header, flags), 46u);
  EXPECT_EQ(offsetof(Header, incarnation), 48u);
  EXPECT_EQ(offsetof(Header, transfer_id), 52u);
  EXPECT_EQ(offsetof(Header, checksum), 56u);
  EXPECT_EQ(sizeof(wire::Run), 8u);
  EXPECT_EQ(sizeof(SeqRange), 8u);
  EXPECT_EQ(sizeof(HelloBody), 8u);
  EXPECT_EQ(DataFrameWriter::kMinFrameBytes, 136u);
}

TEST(WireLayoutTest, FieldsAreLittleEndianOnTheWire) {
  Header h = BaseHeader(FrameType::kHeartbeat);
  h.source_host = 0x0102;
  h.area_index = 0x0a0b0c0d;
  h.version = 0x1122334455667788u;
  const Bytes f = MakeFrame(h, Bytes(sizeof(HeartbeatBody)));
  EXPECT_EQ(std::string(f.begin(), f.begin() + 4), "DSMF");
  EXPECT_EQ(f[4], kProtocolVersion);
  EXPECT_EQ(f[5], 3);
  EXPECT_EQ(f[6], 0x02);
  EXPECT_EQ(f[7], 0x01);
  EXPECT_EQ((Bytes{f[12], f[13], f[14], f[15]}), (Bytes{0x0d, 0x0c, 0x0b, 0x0a}));
  EXPECT_EQ((Bytes(f.begin() + 20, f.begin() + 28)),
            (Bytes{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}));
  static_assert(sizeof(HeartbeatBody) == 24);
  EXPECT_EQ((Bytes{f[44], f[45]}), (Bytes{24, 0}));  // payload_bytes
}

TEST(WireLayoutTest, SealIsXxh3OverTheHeaderWithAZeroChecksumThenThePayload) {
  Bytes f = ValidData();
  Poke<uint64_t>(f, offsetof(Header, checksum),
                 0xdeadbeefdeadbeefu);  // Seal ignores what was there
  Poke<uint16_t>(f, offsetof(Header, payload_bytes), 12345);
  Reseal(f);
  EXPECT_EQ(Peek<uint16_t>(f, offsetof(Header, payload_bytes)), f.size() - sizeof(Header));
  Bytes zeroed = f;
  Poke<uint64_t>(zeroed, offsetof(Header, checksum), 0);
  EXPECT_EQ(Peek<uint64_t>(f, offsetof(Header, checksum)),
            XXH3_64bits(zeroed.data(), zeroed.size()));
  EXPECT_EQ(DecodeBytes(f), DropReason::kNone);
}

TEST(WireLayoutTest, ChecksumAgreesForEveryPayloadSize) {
  // XXH3 switches algorithm at 16, 128 and 240 bytes: Seal hashes the frame in
  // one call, Decode in two pieces, and both must agree at every size.
  for (size_t n = 0; n <= 600; ++n) {
    Header h = BaseHeader(FrameType::kDirectory);
    Bytes payload(n);
    for (size_t i = 0; i < n; ++i) payload[i] = static_cast<uint8_t>(i ^ n);
    Bytes f = MakeFrame(h, payload);
    Frame out;
    const DropReason r = DecodeBytes(f, &out);
    EXPECT_EQ(r, n % sizeof(DirectoryEntry) == 0 ? DropReason::kNone : DropReason::kBadLayout) << n;
  }
}

TEST(WireLayoutTest, DropReasonNamesAreDistinct) {
  std::set<std::string> names;
  for (int r = 0; r < static_cast<int>(DropReason::kCount); ++r) {
    const std::string name = DropReasonName(static_cast<DropReason>(r));
    EXPECT_FALSE(name.empty());
    EXPECT_NE(name, "unknown") << r;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(DropReason::kCount));
  EXPECT_STREQ(DropReasonName(DropReason::kBadChecksum), "bad_checksum");
  EXPECT_STREQ(DropReasonName(DropReason::kCount), "unknown");
  EXPECT_STREQ(DropReasonName(static_cast<DropReason>(200)), "unknown");
}

// --- Decode: accepted frames ----------------------------------------------------------

TEST(DecodeTest, AcceptsADataFrameAndPointsIntoIt) {
  const Bytes f = ValidData();
  Frame out;
  ASSERT_EQ(DecodeBytes(f, &out), DropReason::kNone);
  EXPECT_EQ(out.header.type, static_cast<uint8_t>(FrameType::kData));
  EXPECT_EQ(out.header.version, 42u);
  EXPECT_EQ(out.header.run_count, 2u);
  EXPECT_EQ(out.header.payload_bytes, 2 * sizeof(wire::Run) + 3 * kLineBytes);
  ASSERT_EQ(out.runs.size(), 2u);
  EXPECT_EQ(out.runs[0], (wire::Run{10, 2}));
  EXPECT_EQ(out.runs[1], (wire::Run{20, 1}));
  EXPECT_EQ(RunsOf(out), (std::vector<wire::Run>{{10, 2}, {20, 1}}));
  EXPECT_EQ(out.line_data.data(), f.data() + sizeof(Header) + 2 * sizeof(wire::Run));
  EXPECT_EQ(out.line_data.size(), 3 * kLineBytes);
  EXPECT_EQ(out.line_data[0], 7);
  EXPECT_TRUE(out.body.empty());
}

TEST(DecodeTest, AcceptsEveryOtherTypeWithAWellFormedBody) {
  struct Case {
    FrameType type;
    size_t payload;
  };
  const Case cases[] = {
      {FrameType::kAck, 0},
      {FrameType::kAck, sizeof(SeqRange)},
      {FrameType::kAck, kMaxMissingRanges * sizeof(SeqRange)},
      {FrameType::kHeartbeat, sizeof(HeartbeatBody)},
      {FrameType::kDirectory, 0},
      {FrameType::kDirectory, 3 * sizeof(DirectoryEntry)},
      {FrameType::kSubscribe, 0},
      {FrameType::kHello, sizeof(HelloBody)},
      {FrameType::kHelloReply, sizeof(HelloBody)},
  };
  for (const Case& c : cases) {
    Header h = BaseHeader(c.type);
    if (c.type == FrameType::kSubscribe) h.flags = kFlagUnsubscribe;
    if (c.type != FrameType::kDirectory) h.frame_count = 0;  // checked for DATA and DIRECTORY only
    Bytes payload(c.payload);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
    const Bytes f = MakeFrame(h, payload);
    Frame out;
    ASSERT_EQ(DecodeBytes(f, &out), DropReason::kNone)
        << static_cast<int>(c.type) << " " << c.payload;
    EXPECT_EQ(out.header.type, static_cast<uint8_t>(c.type));
    EXPECT_EQ(out.header.flags, h.flags);
    EXPECT_EQ(out.body.size(), c.payload);
    EXPECT_EQ(out.body.data(), f.data() + sizeof(Header));
    EXPECT_TRUE(out.runs.empty());
    EXPECT_TRUE(out.line_data.empty());
  }
}

TEST(DecodeTest, AcceptsAdjacentRunsAndARunEndingAtTheLastLineIndex) {
  // Adjacent runs are not maximal, but harmless; the writer never sends them.
  EXPECT_EQ(DecodeBytes(MakeData({{0, 1}, {1, 1}}, 2 * kLineBytes)), DropReason::kNone);
  // Exclusive end 0xffffffff still fits in 32 bits.
  EXPECT_EQ(DecodeBytes(MakeData({{0xfffffffe, 1}}, kLineBytes)), DropReason::kNone);
}

TEST(DecodeTest, DecodesAtAnyAlignment) {
  const Bytes f = ValidData();
  for (size_t shift = 0; shift < 8; ++shift) {
    Bytes buffer(shift + f.size());
    std::copy(f.begin(), f.end(), buffer.begin() + static_cast<std::ptrdiff_t>(shift));
    Frame out;
    ASSERT_EQ(Decode(std::span<const uint8_t>(buffer.data() + shift, f.size()), &out),
              DropReason::kNone)
        << shift;
    EXPECT_EQ(RunsOf(out), (std::vector<wire::Run>{{10, 2}, {20, 1}})) << shift;
  }
}

// --- Decode: drop reasons --------------------------------------------------------------

TEST(DecodeDropTest, ShorterThanAHeaderIsTruncated) {
  const Bytes f = ValidData();
  for (size_t n : {size_t{0}, size_t{1}, size_t{4}, sizeof(Header) - 1}) {
    EXPECT_EQ(DecodeBytes(Bytes(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n))),
              DropReason::kTruncated)
        << n;
  }
  Frame out;
  EXPECT_EQ(Decode(std::span<const uint8_t>(), &out), DropReason::kTruncated);
}

TEST(DecodeDropTest, ShorterThanPayloadBytesSaysIsTruncated) {
  Bytes f = ValidData();
  for (size_t cut : {size_t{1}, size_t{63}, f.size() - sizeof(Header)}) {
    EXPECT_EQ(DecodeBytes(Bytes(f.begin(), f.end() - static_cast<std::ptrdiff_t>(cut))),
              DropReason::kTruncated)
        << cut;
  }
  Poke<uint16_t>(f, offsetof(Header, payload_bytes), UINT16_MAX);
  EXPECT_EQ(DecodeBytes(f), DropReason::kTruncated);
}

TEST(DecodeDropTest, LongerThanPayloadBytesSaysIsOversized) {
  Bytes f = ValidData();
  f.push_back(0);
  EXPECT_EQ(DecodeBytes(f), DropReason::kOversized);
  f.resize(f.size() + 1000);
  EXPECT_EQ(DecodeBytes(f), DropReason::kOversized);
  Bytes empty_claim = ValidData();
  Poke<uint16_t>(empty_claim, offsetof(Header, payload_bytes), 0);
  EXPECT_EQ(DecodeBytes(empty_claim), DropReason::kOversized);
}

TEST(DecodeDropTest, BadMagic) {
  for (uint32_t magic : {0u, 0x46534d44u /* "DSMF" byte-swapped */, kMagic ^ 1u, 0xffffffffu}) {
    Bytes f = ValidData();
    Poke(f, offsetof(Header, magic), magic);
    Reseal(f);
    EXPECT_EQ(DecodeBytes(f), DropReason::kBadMagic) << magic;
  }
}

TEST(DecodeDropTest, MagicAndVersionAreJudgedBeforeTheLength) {
  // Foreign traffic and other protocol versions are counted as such, whatever their size.
  Bytes f = ValidData();
  Poke<uint32_t>(f, offsetof(Header, magic), 0);
  f.push_back(0);
  EXPECT_EQ(DecodeBytes(f), DropReason::kBadMagic);
  Bytes g = ValidData();
  Poke<uint8_t>(g, offsetof(Header, protocol_version), kProtocolVersion + 1);
  g.pop_back();
  EXPECT_EQ(DecodeBytes(g), DropReason::kBadVersion);
}

TEST(DecodeDropTest, BadProtocolVersion) {
  for (uint8_t version : {uint8_t{0}, uint8_t{1}, uint8_t{kProtocolVersion + 1}, uint8_t{255}}) {
    Bytes f = ValidData();
    Poke(f, offsetof(Header, protocol_version), version);
    Reseal(f);
    EXPECT_EQ(DecodeBytes(f), DropReason::kBadVersion) << int{version};
  }
}

TEST(DecodeDropTest, UnknownType) {
  for (uint8_t type : {uint8_t{0}, uint8_t{8}, uint8_t{0x81}, uint8_t{255}}) {
    Bytes f = MakeFrame(BaseHeader(FrameType::kSubscribe), {});
    Poke(f, offsetof(Header, type), type);
    Reseal(f);
    EXPECT_EQ(DecodeBytes(f), DropReason::kBadType) << int{type};
  }
}

TEST(DecodeDropTest, CorruptPayloadByteFailsTheChecksum) {
  const Bytes good = ValidData();
  for (size_t at = sizeof(Header); at < good.size(); at += 7) {
    Bytes f = good;
    f[at] ^= 0x10;
    EXPECT_EQ(DecodeBytes(f), DropReason::kBadChecksum) << at;
  }
}

TEST(DecodeDropTest, CorruptHeaderFieldOrChecksumFailsTheChecksum) {
  const Bytes good = ValidData();
  for (size_t at :
       {offsetof(Header, source_host), offsetof(Header, dest_host), offsetof(Header, area_index),
        offsetof(Header, area_generation), offsetof(Header, version),
        offsetof(Header, base_version) + 7, offsetof(Header, seq), offsetof(Header, frame_count),
        offsetof(Header, flags), offsetof(Header, checksum), offsetof(Header, checksum) + 7}) {
    Bytes f = good;
    f[at] ^= 0x01;
    EXPECT_EQ(DecodeBytes(f), DropReason::kBadChecksum) << at;
  }
}

TEST(DecodeDropTest, EverySingleBitFlipIsDropped) {
  const Bytes good = ValidData();
  for (size_t bit = 0; bit < good.size() * 8; ++bit) {
    Bytes f = good;
    f[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_NE(DecodeBytes(f), DropReason::kNone) << "bit " << bit;
  }
}

TEST(DecodeDropTest, DataLayoutErrorsWithAValidChecksum) {
  // Every frame below is sealed, so the layout check is what must reject it.
  struct Case {
    const char* what;
    Bytes frame;
  };
  Header seq_past = BaseHeader(FrameType::kData);
  seq_past.seq = 3;
  seq_past.frame_count = 3;
  Header seq_far = BaseHeader(FrameType::kData);
  seq_far.seq = 100;
  seq_far.frame_count = 3;
  Header no_frames = BaseHeader(FrameType::kData);
  no_frames.seq = 0;
  no_frames.frame_count = 0;
  // run_count larger than the payload can hold: 2 runs declared, 8 bytes of payload.
  Bytes runs_past_payload = MakeData({{0, 1}}, 0);
  Poke<uint16_t>(runs_past_payload, offsetof(Header, run_count), 2);
  Reseal(runs_past_payload);
  Bytes huge_run_count = MakeData({{0, 1}}, kLineBytes);
  Poke<uint16_t>(huge_run_count, offsetof(Header, run_count), 0xffff);
  Reseal(huge_run_count);
  const Case cases[] = {
      {"no runs", MakeData({}, kLineBytes)},
      {"no runs, no lines", MakeData({}, 0)},
      {"run list past the payload", runs_past_payload},
      {"run count 65535", huge_run_count},
      {"descending runs", MakeData({{20, 1}, {10, 1}}, 2 * kLineBytes)},
      {"overlapping runs", MakeData({{10, 5}, {14, 1}}, 6 * kLineBytes)},
      {"repeated run", MakeData({{10, 1}, {10, 1}}, 2 * kLineBytes)},
      {"zero-length run", MakeData({{10, 0}}, 0)},
      {"zero-length run among others", MakeData({{10, 1}, {12, 0}, {14, 1}}, 2 * kLineBytes)},
      {"end wraps 32 bits", MakeData({{0xffffffff, 1}}, kLineBytes)},
      {"end wraps 32 bits by far", MakeData({{0xfffffff0, 0x20}}, 0x20 * kLineBytes)},
      {"fewer line bytes than the runs", MakeData({{10, 2}}, kLineBytes)},
      {"more line bytes than the runs", MakeData({{10, 1}}, 2 * kLineBytes)},
      {"a partial line", MakeData({{10, 1}}, kLineBytes + 1)},
      {"a line short by one byte", MakeData({{10, 1}}, kLineBytes - 1)},
      {"seq == frame_count", MakeData({{10, 1}}, kLineBytes, seq_past)},
      {"seq > frame_count", MakeData({{10, 1}}, kLineBytes, seq_far)},
      {"frame_count 0", MakeData({{10, 1}}, kLineBytes, no_frames)},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DecodeBytes(c.frame), DropReason::kBadLayout) << c.what;
  }
}

TEST(DecodeDropTest, BodyLayoutErrorsWithAValidChecksum) {
  struct Case {
    const char* what;
    FrameType type;
    size_t payload;
    uint16_t run_count = 0;
    uint32_t seq = 0;
    uint32_t frame_count = 1;
  };
  const Case cases[] = {
      {"ack, partial range", FrameType::kAck, 7},
      {"ack, range and a half", FrameType::kAck, sizeof(SeqRange) + 4},
      {"ack, too many ranges", FrameType::kAck, (kMaxMissingRanges + 1) * sizeof(SeqRange)},
      {"ack with runs", FrameType::kAck, 0, 1},
      {"heartbeat, empty", FrameType::kHeartbeat, 0},
      {"heartbeat, short", FrameType::kHeartbeat, sizeof(HeartbeatBody) - 1},
      {"heartbeat, long", FrameType::kHeartbeat, sizeof(HeartbeatBody) + 1},
      {"directory, partial entry", FrameType::kDirectory, sizeof(DirectoryEntry) - 1},
      {"directory, entry and a byte", FrameType::kDirectory, sizeof(DirectoryEntry) + 1},
      {"directory with runs", FrameType::kDirectory, sizeof(DirectoryEntry), 2},
      {"directory, seq past its round", FrameType::kDirectory, 0, 0, 1, 1},
      {"directory, round of no frames", FrameType::kDirectory, 0, 0, 0, 0},
      {"hello, empty", FrameType::kHello, 0},
      {"hello reply, long", FrameType::kHelloReply, sizeof(HelloBody) + 1},
      {"subscribe with a body", FrameType::kSubscribe, 1},
      {"subscribe with runs", FrameType::kSubscribe, 0, 3},
  };
  for (const Case& c : cases) {
    Header h = BaseHeader(c.type);
    h.run_count = c.run_count;
    h.seq = c.seq;
    h.frame_count = c.frame_count;
    EXPECT_EQ(DecodeBytes(MakeFrame(h, Bytes(c.payload))), DropReason::kBadLayout) << c.what;
  }
}

TEST(DecodeDropTest, OutIsLeftAloneOnADrop) {
  Frame out;
  out.header.version = 12345;
  Bytes f = ValidData();
  f.back() ^= 1;
  ASSERT_EQ(DecodeBytes(f, &out), DropReason::kBadChecksum);
  EXPECT_EQ(out.header.version, 12345u);
  ASSERT_EQ(DecodeBytes(MakeData({{10, 0}}, 0), &out), DropReason::kBadLayout);
  EXPECT_EQ(out.header.version, 12345u);
  EXPECT_TRUE(out.runs.empty());
}

// A frame laid out to end exactly at a PROT_NONE page: a read past it faults.
class GuardedBuffer {
 public:
  GuardedBuffer() {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, 3 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    if (base_ != nullptr) mprotect(base_ + 2 * page_, page_, PROT_NONE);
  }
  ~GuardedBuffer() {
    if (base_ != nullptr) munmap(base_, 3 * page_);
  }
  bool ok() const { return base_ != nullptr; }
  // Copies `bytes` to end at the guard page; returns the view.
  std::span<const uint8_t> Place(std::span<const uint8_t> bytes) {
    uint8_t* at = base_ + 2 * page_ - bytes.size();
    std::memcpy(at, bytes.data(), bytes.size());
    return {at, bytes.size()};
  }

 private:
  size_t page_ = 0;
  uint8_t* base_ = nullptr;
};

TEST(DecodeDropTest, NeverReadsPastTheEndOfTheSpan) {
  GuardedBuffer guard;
  ASSERT_TRUE(guard.ok());
  std::vector<Bytes> frames = {ValidData(), MakeData({{0, 1}}, 0), MakeData({{0, 3}}, kLineBytes)};
  Bytes many_runs = MakeData({{0, 1}}, kLineBytes);
  Poke<uint16_t>(many_runs, offsetof(Header, run_count), 0xffff);  // claims 512 KiB of runs
  Reseal(many_runs);
  frames.push_back(many_runs);
  frames.push_back(MakeFrame(BaseHeader(FrameType::kHeartbeat), Bytes(sizeof(HeartbeatBody))));
  Frame out;
  for (const Bytes& f : frames) {
    // Every prefix too: each ends at the guard page.
    for (size_t n = 0; n <= f.size(); ++n) {
      Decode(guard.Place(std::span<const uint8_t>(f.data(), n)), &out);
    }
  }
  EXPECT_EQ(Decode(guard.Place(frames[0]), &out), DropReason::kNone);
  // A frame claiming a bigger payload than it has, at the guard page.
  Bytes claims_more = ValidData();
  Poke<uint16_t>(claims_more, offsetof(Header, payload_bytes), 60000);
  EXPECT_EQ(Decode(guard.Place(claims_more), &out), DropReason::kTruncated);
}

TEST(DecodeDropTest, RandomBytesAndMutatedFramesNeverCrashOrPassBadLayouts) {
  std::mt19937_64 rng(0x5eed3001);
  const Bytes valid[] = {
      ValidData(), MakeFrame(BaseHeader(FrameType::kAck), Bytes(16)),
      MakeFrame(BaseHeader(FrameType::kHeartbeat), Bytes(sizeof(HeartbeatBody))),
      MakeFrame(BaseHeader(FrameType::kDirectory), Bytes(sizeof(DirectoryEntry))),
      MakeFrame(BaseHeader(FrameType::kSubscribe), {})};
  int accepted = 0;
  for (int round = 0; round < 30000; ++round) {
    Bytes f;
    const int kind = round % 3;
    if (kind == 0) {  // noise
      f.resize(rng() % 300);
      for (uint8_t& b : f) b = static_cast<uint8_t>(rng());
    } else {  // a valid frame with a few bytes changed (and resealed: to reach the layout checks)
      f = valid[rng() % std::size(valid)];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const size_t at = rng() % f.size();
        // Mostly the small fields that steer the layout: run_count, seq, frame_count, runs.
        f[at] = rng() % 2 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(rng() % 4);
      }
      if (rng() % 8 == 0) f.resize(f.size() + rng() % 16);
      if (kind == 2 && f.size() >= sizeof(Header)) Reseal(f);
    }
    Frame out;
    const DropReason r = DecodeBytes(f, &out);
    ASSERT_LT(static_cast<int>(r), static_cast<int>(DropReason::kCount));
    if (r != DropReason::kNone) continue;
    ++accepted;
    const uint8_t* begin = f.data();
    const uint8_t* end = f.data() + f.size();
    auto inside = [&](std::span<const uint8_t> s) {
      return s.empty() || (s.data() >= begin && s.data() + s.size() <= end);
    };
    ASSERT_TRUE(inside(out.line_data));
    ASSERT_TRUE(inside(out.body));
    if (out.header.type == static_cast<uint8_t>(FrameType::kData)) {
      uint64_t next = 0, lines = 0;
      for (const wire::Run run : out.runs) {
        ASSERT_GE(run.first_line, next);
        ASSERT_GT(run.line_count, 0u);
        next = uint64_t{run.first_line} + run.line_count;
        lines += run.line_count;
      }
      ASSERT_EQ(lines * kLineBytes, out.line_data.size());
      ASSERT_LT(out.header.seq, out.header.frame_count);
    }
  }
  EXPECT_GT(accepted, 100);  // the resealed mutations must reach the layout checks
}

// --- DataFrameWriter ---------------------------------------------------------------------

// Decodes every frame, applies its lines to `replica` and marks them in `received`.
void ApplyFrames(const std::vector<Bytes>& frames, uint32_t expected_count, uint8_t* replica,
                 LineSet& received) {
  for (size_t i = 0; i < frames.size(); ++i) {
    Frame f;
    ASSERT_EQ(DecodeBytes(frames[i], &f), DropReason::kNone) << "frame " << i;
    ASSERT_EQ(f.header.seq, i);
    ASSERT_EQ(f.header.frame_count, expected_count);
    size_t at = 0;
    for (const wire::Run r : f.runs) {
      ASSERT_LE(uint64_t{r.first_line} + r.line_count, received.lines());
      for (uint32_t l = 0; l < r.line_count; ++l) {
        ASSERT_FALSE(received.Test(r.first_line + l)) << "line sent twice: " << r.first_line + l;
      }
      received.AddLines(r.first_line, r.line_count);
      const size_t bytes = size_t{r.line_count} * kLineBytes;
      std::memcpy(replica + size_t{r.first_line} * kLineBytes, f.line_data.data() + at, bytes);
      at += bytes;
    }
  }
}

LineSet MakePattern(size_t area, int pattern, std::mt19937_64& rng) {
  LineSet set(area);
  const size_t lines = set.lines();
  switch (pattern) {
    case 0:  // one line
      set.AddLines(rng() % lines, 1);
      break;
    case 1:  // sparse
      for (size_t i = 0; i < lines / 100 + 1; ++i) set.AddLines(rng() % lines, 1);
      break;
    case 2:  // dense, short runs and gaps
      for (size_t i = 0; i < lines; ++i) {
        if (rng() % 10 < 6) set.AddLines(i, 1);
      }
      break;
    case 3:  // runs of up to 300 lines
      for (size_t i = 0; i < lines / 200 + 1; ++i) set.AddLines(rng() % lines, 1 + rng() % 300);
      break;
    case 4:  // alternating
      for (size_t i = 0; i < lines; i += 2) set.AddLines(i, 1);
      break;
    default:  // everything
      set.AddAll();
      break;
  }
  return set;
}
constexpr int kPatterns = 6;

TEST(DataFrameWriterTest, RoundTripsRandomLineSetsAtEveryFrameSize) {
  std::mt19937_64 rng(0x5eed3002);
  const size_t areas[] = {kLineBytes, 4096, 194 * kLineBytes, size_t{1} << 20};
  const size_t frame_sizes[] = {DataFrameWriter::kMinFrameBytes, 200, 1472, 1500, 8972, 9000,
                                DataFrameWriter::kMaxFrameBytes};
  for (size_t area : areas) {
    Bytes content(area);
    for (uint8_t& b : content) b = static_cast<uint8_t>(rng());
    for (int pattern = 0; pattern < kPatterns; ++pattern) {
      const LineSet lines = MakePattern(area, pattern, rng);
      for (size_t max : frame_sizes) {
        if (area == (size_t{1} << 20) && max == DataFrameWriter::kMinFrameBytes && pattern >= 2) {
          continue;  // tens of thousands of one-line frames: covered by the smaller areas
        }
        SCOPED_TRACE(testing::Message()
                     << "area " << area << " pattern " << pattern << " max " << max);
        Header h = WriterHeader();
        h.flags = pattern == kPatterns - 1 ? uint32_t{kFlagFull} : 0u;
        const DataFrameWriter writer(max, h);
        ASSERT_TRUE(writer.ok());
        VectorSink sink;
        const uint32_t count = writer.CountFrames(lines);
        ASSERT_EQ(writer.Write(lines, content.data(), sink), count);
        ASSERT_EQ(sink.frames.size(), count);
        ASSERT_GT(count, 0u);
        EXPECT_EQ(sink.last_reserve_bytes, max);
        for (size_t i = 0; i < sink.frames.size(); ++i) {
          ASSERT_LE(sink.frames[i].size(), max) << "frame " << i;
          // A frame is closed only when not even one more line fits.
          if (i + 1 < sink.frames.size()) {
            ASSERT_GT(sink.frames[i].size() + sizeof(wire::Run) + kLineBytes, max) << "frame " << i;
          }
        }
        Bytes replica(area, 0);
        LineSet received(area);
        ApplyFrames(sink.frames, count, replica.data(), received);
        if (HasFatalFailure()) return;
        ASSERT_EQ(received.CountLines(), lines.CountLines());
        for (size_t line = 0; line < lines.lines(); ++line) {
          const size_t at = line * kLineBytes;
          ASSERT_EQ(received.Test(line), lines.Test(line)) << "line " << line;
          if (lines.Test(line)) {
            ASSERT_EQ(std::memcmp(replica.data() + at, content.data() + at, kLineBytes), 0) << line;
          } else {
            ASSERT_TRUE(std::all_of(replica.begin() + at, replica.begin() + at + kLineBytes,
                                    [](uint8_t b) { return b == 0; }))
                << line;
          }
        }
        Frame first;
        ASSERT_EQ(DecodeBytes(sink.frames[0], &first), DropReason::kNone);
        EXPECT_EQ(first.header.flags, h.flags);

        // Retransmissions are byte-identical to the originals.
        for (int r = 0; r < 4; ++r) {
          const uint32_t from = static_cast<uint32_t>(rng() % count);
          const uint32_t n = 1 + static_cast<uint32_t>(rng() % 3);
          VectorSink again;
          const uint32_t expected = std::min(n, count - from);
          ASSERT_EQ(writer.WriteRange(lines, content.data(), from, n, again), expected);
          for (uint32_t k = 0; k < expected; ++k) ASSERT_EQ(again.frames[k], sink.frames[from + k]);
        }
      }
    }
  }
}

TEST(DataFrameWriterTest, FramesWithTailsAreTheBytesOfCopiedFramesAndPointIntoTheContent) {
  std::mt19937_64 rng(0x5eed3003);
  const size_t area = size_t{1} << 20;
  Bytes content(area);
  for (uint8_t& b : content) b = static_cast<uint8_t>(rng());
  for (int pattern = 0; pattern < kPatterns; ++pattern) {
    const LineSet lines = MakePattern(area, pattern, rng);
    for (size_t max : {size_t{200}, size_t{1472}, size_t{8972}}) {
      SCOPED_TRACE(testing::Message() << "pattern " << pattern << " max " << max);
      const DataFrameWriter writer(max, WriterHeader());
      const DataFrameWriter::Plan plan = writer.MakePlan(lines);
      VectorSink copied;
      TailRecordingSink tailed;
      ASSERT_EQ(writer.WritePlanned(plan, content.data(), 0, plan.frames(), copied), plan.frames());
      ASSERT_EQ(writer.WritePlanned(plan, content.data(), 0, plan.frames(), tailed), plan.frames());
      ASSERT_EQ(tailed.frames, copied.frames);
      // Exactly the frames with one run had their lines passed by reference,
      // each at its own place in the content.
      size_t one_run_frames = 0;
      for (uint32_t seq = 0; seq < plan.frames(); ++seq) {
        if (plan.frame_start[seq + 1] - plan.frame_start[seq] != 1) continue;
        const wire::Run r = plan.runs[plan.frame_start[seq]];
        ASSERT_LT(one_run_frames, tailed.tails.size());
        const std::span<const uint8_t> tail = tailed.tails[one_run_frames++];
        EXPECT_EQ(tail.data(), content.data() + size_t{r.first_line} * kLineBytes) << seq;
        EXPECT_EQ(tail.size(), size_t{r.line_count} * kLineBytes) << seq;
      }
      EXPECT_EQ(tailed.tails.size(), one_run_frames);
    }
  }
}

TEST(DataFrameWriterTest, FramesFromCompactLinesAreTheBytesOfFramesFromTheArea) {
  std::mt19937_64 rng(0x5eed3004);
  const size_t area = size_t{1} << 20;
  Bytes content(area);
  for (uint8_t& b : content) b = static_cast<uint8_t>(rng());
  for (int pattern = 0; pattern < kPatterns; ++pattern) {
    const LineSet lines = MakePattern(area, pattern, rng);
    // The marked lines gathered back to back, as a staged version holds them.
    Bytes compact;
    std::vector<wire::Run> runs;
    lines.ForEachRun([&](size_t first, size_t count) {
      compact.insert(compact.end(), content.begin() + static_cast<ptrdiff_t>(first * kLineBytes),
                     content.begin() + static_cast<ptrdiff_t>((first + count) * kLineBytes));
      runs.push_back(wire::Run{static_cast<uint32_t>(first), static_cast<uint32_t>(count)});
    });
    for (size_t max : {size_t{200}, size_t{1472}, size_t{8972}}) {
      SCOPED_TRACE(testing::Message() << "pattern " << pattern << " max " << max);
      const DataFrameWriter writer(max, WriterHeader());
      const DataFrameWriter::Plan plan = writer.MakePlan(lines);
      ASSERT_EQ(plan.lines_before.size(), plan.frame_start.size());
      // Planned from the runs (as a stage lists them): the same plan.
      const DataFrameWriter::Plan of_runs = writer.MakePlanOfRuns(runs);
      EXPECT_EQ(of_runs.frame_start, plan.frame_start);
      EXPECT_EQ(of_runs.lines_before, plan.lines_before);
      ASSERT_EQ(of_runs.runs.size(), plan.runs.size());
      for (size_t i = 0; i < plan.runs.size(); ++i) {
        ASSERT_EQ(of_runs.runs[i].first_line, plan.runs[i].first_line);
        ASSERT_EQ(of_runs.runs[i].line_count, plan.runs[i].line_count);
      }
      if (plan.frames() > 0) {
        EXPECT_EQ(plan.lines_before.back() * kLineBytes, compact.size());
      }
      VectorSink expected, copied;
      TailRecordingSink tailed;
      ASSERT_EQ(writer.WritePlanned(plan, content.data(), 0, plan.frames(), expected),
                plan.frames());
      ASSERT_EQ(writer.WriteCompact(plan, compact.data(), 0, plan.frames(), copied), plan.frames());
      ASSERT_EQ(writer.WriteCompact(plan, compact.data(), 0, plan.frames(), tailed), plan.frames());
      ASSERT_EQ(copied.frames, expected.frames);
      ASSERT_EQ(tailed.frames, expected.frames);
      // Every frame's lines went by reference, each a slice of the compact copy.
      ASSERT_EQ(tailed.tails.size(), plan.frames());
      for (uint32_t seq = 0; seq < plan.frames(); ++seq) {
        EXPECT_EQ(tailed.tails[seq].data(),
                  compact.data() + size_t{plan.lines_before[seq]} * kLineBytes);
      }
      // A range from the middle: the same frames again.
      if (plan.frames() > 2) {
        VectorSink part;
        ASSERT_EQ(writer.WriteCompact(plan, compact.data(), 1, 2, part), 2u);
        EXPECT_EQ(part.frames[0], expected.frames[1]);
        EXPECT_EQ(part.frames[1], expected.frames[2]);
      }
    }
  }
}

TEST(DataFrameWriterTest, WriteRangeEdges) {
  LineSet lines(64 * 4096);
  lines.AddAll();
  Bytes content(64 * 4096, 9);
  const DataFrameWriter writer(1500, WriterHeader());
  VectorSink all;
  const uint32_t count = writer.Write(lines, content.data(), all);
  ASSERT_GT(count, 10u);
  struct Case {
    uint32_t first, n, expected;
  };
  const Case cases[] = {
      {0, UINT32_MAX, count},
      {count - 1, UINT32_MAX, 1},  // first + n overflows 32 bits
      {UINT32_MAX, UINT32_MAX, 0},
      {count, 1, 0},
      {count + 5, 3, 0},
      {3, 0, 0},
      {0, 1, 1},
      {count - 2, 5, 2},
  };
  for (const Case& c : cases) {
    VectorSink sink;
    EXPECT_EQ(writer.WriteRange(lines, content.data(), c.first, c.n, sink), c.expected)
        << c.first << "+" << c.n;
    ASSERT_EQ(sink.frames.size(), c.expected);
    EXPECT_EQ(sink.reserves, static_cast<int>(c.expected));
    for (uint32_t k = 0; k < c.expected; ++k) EXPECT_EQ(sink.frames[k], all.frames[c.first + k]);
  }
}

TEST(DataFrameWriterTest, PacksRunsIntoFramesAndSplitsWhatDoesNotFit) {
  // Room for one run of 10 lines: header + 8 + 640.
  const size_t max = sizeof(Header) + sizeof(wire::Run) + 10 * kLineBytes;
  const DataFrameWriter writer(max, WriterHeader());
  struct Case {
    std::vector<std::pair<size_t, size_t>> add;
    std::vector<std::vector<wire::Run>> frames;
  };
  const Case cases[] = {
      {{{100, 10}}, {{{100, 10}}}},              // exactly full
      {{{100, 11}}, {{{100, 10}}, {{110, 1}}}},  // one line over
      {{{100, 25}}, {{{100, 10}}, {{110, 10}}, {{120, 5}}}},
      // 5 + 5 lines in two runs need 16 + 640 bytes: the second run is split.
      {{{0, 5}, {10, 5}}, {{{0, 5}, {10, 4}}, {{14, 1}}}},
      {{{0, 1}, {2, 1}, {4, 1}}, {{{0, 1}, {2, 1}, {4, 1}}}},
      // Runs across page boundaries, added out of order, come out in address order.
      {{{130, 2}, {60, 8}}, {{{60, 8}, {130, 1}}, {{131, 1}}}},
  };
  for (const Case& c : cases) {
    LineSet lines(8 * 4096);
    for (auto [first, count] : c.add) lines.AddLines(first, count);
    Bytes content(8 * 4096);
    for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<uint8_t>(i / kLineBytes);
    VectorSink sink;
    ASSERT_EQ(writer.CountFrames(lines), c.frames.size());
    ASSERT_EQ(writer.Write(lines, content.data(), sink), c.frames.size());
    for (size_t i = 0; i < c.frames.size(); ++i) {
      Frame f;
      ASSERT_EQ(DecodeBytes(sink.frames[i], &f), DropReason::kNone);
      EXPECT_EQ(RunsOf(f), c.frames[i]) << "frame " << i;
      EXPECT_EQ(f.header.run_count, c.frames[i].size());
      // Line data is the content of each run's lines, in run order.
      size_t at = 0;
      for (const wire::Run r : f.runs) {
        for (uint32_t l = 0; l < r.line_count; ++l, at += kLineBytes) {
          EXPECT_EQ(f.line_data[at], static_cast<uint8_t>(r.first_line + l));
        }
      }
    }
  }
}

TEST(DataFrameWriterTest, SmallestFrameCarriesOneLine) {
  const DataFrameWriter writer(DataFrameWriter::kMinFrameBytes, WriterHeader());
  ASSERT_TRUE(writer.ok());
  LineSet lines(4096);
  lines.AddLines(5, 3);
  Bytes content(4096, 1);
  VectorSink sink;
  ASSERT_EQ(writer.Write(lines, content.data(), sink), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sink.frames[i].size(), DataFrameWriter::kMinFrameBytes);
    Frame f;
    ASSERT_EQ(DecodeBytes(sink.frames[i], &f), DropReason::kNone);
    EXPECT_EQ(RunsOf(f), (std::vector<wire::Run>{{static_cast<uint32_t>(5 + i), 1}}));
  }
}

TEST(DataFrameWriterTest, FrameSizesThatCannotCarryALineAreRejected) {
  LineSet lines(4096);
  lines.AddAll();
  Bytes content(4096);
  for (size_t max : {size_t{0}, sizeof(Header), DataFrameWriter::kMinFrameBytes - 1,
                     DataFrameWriter::kMaxFrameBytes + 1, size_t{1} << 40}) {
    const DataFrameWriter writer(max, WriterHeader());
    EXPECT_FALSE(writer.ok()) << max;
    EXPECT_EQ(writer.CountFrames(lines), 0u) << max;
    VectorSink sink;
    EXPECT_EQ(writer.Write(lines, content.data(), sink), 0u) << max;
    EXPECT_EQ(writer.WriteRange(lines, content.data(), 0, 10, sink), 0u) << max;
    EXPECT_EQ(sink.reserves, 0) << max;
  }
  EXPECT_TRUE(DataFrameWriter(DataFrameWriter::kMaxFrameBytes, WriterHeader()).ok());
}

TEST(DataFrameWriterTest, LargestFrameKeepsRunCountInSixteenBits) {
  // Alternating lines in the largest frame: as many runs as fit, each a line.
  const DataFrameWriter writer(DataFrameWriter::kMaxFrameBytes, WriterHeader());
  LineSet lines(size_t{64} << 20);
  for (size_t i = 0; i < 40000; i += 2) lines.AddLines(i, 1);
  Bytes content(40000 * kLineBytes, 3);
  VectorSink sink;
  const uint32_t count = writer.Write(lines, content.data(), sink);
  ASSERT_EQ(count, writer.CountFrames(lines));
  const size_t per_frame =
      (DataFrameWriter::kMaxFrameBytes - sizeof(Header)) / (sizeof(wire::Run) + kLineBytes);
  EXPECT_EQ(count, (20000 + per_frame - 1) / per_frame);
  Frame f;
  ASSERT_EQ(DecodeBytes(sink.frames[0], &f), DropReason::kNone);
  EXPECT_EQ(f.runs.size(), per_frame);
}

TEST(DataFrameWriterTest, EmptySetWritesNothing) {
  const DataFrameWriter writer(1500, WriterHeader());
  LineSet lines(4096);
  VectorSink sink;
  EXPECT_EQ(writer.CountFrames(lines), 0u);
  EXPECT_EQ(writer.Write(lines, nullptr, sink), 0u);
  EXPECT_EQ(sink.reserves, 0);
  lines.AddLines(3, 1);
  lines.ClearPage(0);
  EXPECT_EQ(writer.Write(lines, nullptr, sink), 0u);
  EXPECT_EQ(sink.reserves, 0);
}

TEST(DataFrameWriterTest, WriterOwnsTheFramingFieldsAndKeepsTheRest) {
  Header h = WriterHeader();
  h.magic = 0;  // the caller's framing fields are overwritten
  h.protocol_version = 9;
  h.type = static_cast<uint8_t>(FrameType::kAck);
  h.run_count = 77;
  h.seq = 5;
  h.frame_count = 2;
  h.payload_bytes = 3;
  h.checksum = 4;
  h.flags = kFlagFull;
  const DataFrameWriter writer(1500, h);
  LineSet lines(4096);
  lines.AddLines(0, 30);
  Bytes content(4096, 2);
  VectorSink sink;
  ASSERT_EQ(writer.Write(lines, content.data(), sink), 2u);
  for (uint32_t i = 0; i < 2; ++i) {
    Frame f;
    ASSERT_EQ(DecodeBytes(sink.frames[i], &f), DropReason::kNone);
    EXPECT_EQ(f.header.type, static_cast<uint8_t>(FrameType::kData));
    EXPECT_EQ(f.header.source_host, 3u);
    EXPECT_EQ(f.header.dest_host, kAllHosts);
    EXPECT_EQ(f.header.area_index, 17u);
    EXPECT_EQ(f.header.area_generation, 5u);
    EXPECT_EQ(f.header.version, 42u);
    EXPECT_EQ(f.header.base_version, 40u);
    EXPECT_EQ(f.header.flags, static_cast<uint32_t>(kFlagFull));
    EXPECT_EQ(f.header.seq, i);
    EXPECT_EQ(f.header.frame_count, 2u);
    EXPECT_EQ(f.header.run_count, 1u);
  }
}

TEST(DataFrameWriterTest, SinkOutOfBuffersStopsAndTheRestCanFollow) {
  LineSet lines(16 * 4096);
  lines.AddAll();
  Bytes content(16 * 4096);
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<uint8_t>(i * 3);
  const DataFrameWriter writer(1500, WriterHeader());
  VectorSink all;
  const uint32_t count = writer.Write(lines, content.data(), all);
  ASSERT_GT(count, 5u);

  VectorSink starved;
  starved.fail_after = 3;
  EXPECT_EQ(writer.Write(lines, content.data(), starved), 3u);
  EXPECT_EQ(starved.reserves, 4);  // one refusal, then no more asking
  VectorSink rest;
  EXPECT_EQ(writer.WriteRange(lines, content.data(), 3, UINT32_MAX, rest), count - 3);
  std::vector<Bytes> joined = starved.frames;
  joined.insert(joined.end(), rest.frames.begin(), rest.frames.end());
  EXPECT_EQ(joined, all.frames);
}

// --- MTU boundaries and efficiency -------------------------------------------------------

struct Efficiency {
  uint32_t frames;
  size_t largest;
  double wire_per_changed_byte;  // (frames + Ethernet/IPv4/UDP) / changed bytes
};

Efficiency MeasureFullArea(size_t area, size_t max) {
  LineSet lines(area);
  lines.AddAll();
  Bytes content(area, 0x5a);
  const DataFrameWriter writer(max, WriterHeader());
  VectorSink sink;
  Efficiency e{writer.Write(lines, content.data(), sink), 0, 0};
  size_t wire = 0;
  for (const Bytes& f : sink.frames) {
    e.largest = std::max(e.largest, f.size());
    wire += f.size() + kEncapsulationBytes;
  }
  e.wire_per_changed_byte = static_cast<double>(wire) / static_cast<double>(area);
  return e;
}

TEST(DataFrameWriterMtuTest, JumboFramesCarryAFullMiBAtUnderFivePercentOverhead) {
  const size_t area = size_t{1} << 20;
  const size_t lines_per_frame = (9000 - sizeof(Header) - sizeof(wire::Run)) / kLineBytes;  // 139
  const Efficiency e = MeasureFullArea(area, 9000);
  EXPECT_EQ(e.frames, (area / kLineBytes + lines_per_frame - 1) / lines_per_frame);
  EXPECT_LE(e.largest, 9000u);
  EXPECT_GT(e.largest, 9000u - kLineBytes);
  EXPECT_LT(e.wire_per_changed_byte, 1.05);
  RecordProperty("wire_per_changed_byte_9000", std::to_string(e.wire_per_changed_byte));
}

TEST(DataFrameWriterMtuTest, EveryFrameFitsAtStandardAndJumboSizes) {
  // 1472 and 8972: the UDP payload of a 1500- and a 9000-byte IP MTU.
  struct Case {
    size_t max;
    double bound;
  };
  const Case cases[] = {{1472, 1.10}, {1500, 1.10}, {8972, 1.05}, {9000, 1.05}};
  for (const Case& c : cases) {
    const Efficiency e = MeasureFullArea(size_t{1} << 20, c.max);
    EXPECT_LE(e.largest, c.max) << c.max;
    EXPECT_GT(e.largest + kLineBytes, c.max) << c.max;  // full frames use the room
    EXPECT_LT(e.wire_per_changed_byte, c.bound) << c.max;
  }
}

}  // namespace
}  // namespace dsm::wire
