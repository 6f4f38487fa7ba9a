// The libdsm frame format: what follows the Ethernet + IPv4 + UDP headers in
// every frame between daemons (docs/wire-format.md). Pure: encoding writes into
// caller memory, decoding validates caller bytes; no sockets, no DPDK.
//
// All multi-byte fields are little-endian. Every frame carries an XXH3-64
// checksum over its header (with the checksum field zero) and payload, or in
// a cluster with keys an AES-256-GMAC tag after its header (frame_seal.h).
#ifndef DSM_COHERENCE_WIRE_FORMAT_H_
#define DSM_COHERENCE_WIRE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <vector>

#include "coherence/constants.h"
#include "coherence/frame_seal.h"
#include "coherence/line_set.h"

namespace dsm::wire {

inline constexpr uint32_t kMagic = 0x464d5344;  // bytes "DSMF"
inline constexpr uint8_t kProtocolVersion = 3;
inline constexpr uint16_t kAllHosts = 0xffff;  // dest_host of multicast frames

enum class FrameType : uint8_t {
  kData = 1,       // lines of one version of an area (writer host -> reader hosts)
  kAck = 2,        // receiver state of one area (reader host -> writer host)
  kHeartbeat = 3,  // liveness, every host to every host
  kDirectory = 4,  // a host's live areas (for attach by name from anywhere)
  kSubscribe = 5,  // a host starts (or stops) replicating an area
  kHello = 6,      // "who are you?": asks a host to confirm its incarnation
  kHelloReply = 7, // the answer, echoing the hello's nonce
};

// Header flags.
inline constexpr uint16_t kFlagFull = 1u << 0;  // DATA: the whole area (base ignored);
                                                // ACK: the receiver holds no version yet
inline constexpr uint16_t kFlagUnsubscribe = 1u << 1;  // SUBSCRIBE: stop replicating
// Any type: a kTagBytes GMAC tag follows the header, made with the key whose
// id is in bits 8-15; the checksum field holds the nonce (frame_seal.h).
inline constexpr uint16_t kFlagAuthenticated = 1u << 2;
inline constexpr int kKeyIdShift = 8;
inline constexpr uint16_t kKeyIdMask = 0xff00;

struct __attribute__((packed)) Header {
  uint32_t magic;
  uint8_t protocol_version;
  uint8_t type;  // FrameType
  uint16_t source_host;
  uint16_t dest_host;  // kAllHosts for multicast
  uint16_t run_count;  // DATA: runs in the run list
  uint32_t area_index;       // index in the writer host's directory
  uint32_t area_generation;  // detects reuse of the index
  uint64_t version;          // DATA: the version; ACK: last complete version
  uint64_t base_version;     // DATA: lines changed since this version; ACK: version in progress
  uint32_t seq;              // DATA/DIRECTORY: frame index within the version/listing
  uint32_t frame_count;      // DATA/DIRECTORY: frames in the version/listing
  uint16_t payload_bytes;    // bytes after the header
  uint16_t flags;            // kFlag...
  uint32_t incarnation;      // the sender daemon's, drawn at its start: frames of an
                             // incarnation the receiver has not confirmed are dropped
  uint32_t transfer_id;      // DATA: which transmission of `version`; framing may differ
                             // between transfers, so receivers assemble one at a time
  uint64_t checksum;         // XXH3-64 over header (this field 0) + payload;
                             // with kFlagAuthenticated: the tag's nonce
};
static_assert(sizeof(Header) == 64);

// DATA payload: `run_count` runs, then the runs' lines back to back.
struct __attribute__((packed)) Run {
  uint32_t first_line;
  uint32_t line_count;
};

// ACK payload: ranges of `seq` still missing of the version in progress
// (`base_version` of the header), at most kMaxMissingRanges.
struct __attribute__((packed)) SeqRange {
  uint32_t first;
  uint32_t count;
};
inline constexpr size_t kMaxMissingRanges = 64;

struct __attribute__((packed)) HeartbeatBody {
  uint64_t sent_ns;  // sender's monotonic clock (for RTT, not compared across hosts)
  uint64_t region_used_bytes;  // of the sender's backing, held by areas and replicas
  uint64_t region_bytes;       // the sender's whole backing (dsmd --region-size)
};

// HELLO and HELLO_REPLY payload. The reply comes from the host the hello was
// addressed to and carries its incarnation in the header: a restart is believed
// only from a reply to a nonce the receiver drew, never from one frame.
struct __attribute__((packed)) HelloBody {
  uint64_t nonce;
};

struct __attribute__((packed)) DirectoryEntry {
  char name[kMaxNameBytes];
  uint32_t area_index;
  uint32_t area_generation;
  uint64_t addr;
  uint64_t size;
  uint64_t mapped_size;
  uint32_t sync_interval_us;
  uint32_t staleness_bound_ms;
  uint32_t state;  // AreaState
  uint32_t reader_buffers;
  uint64_t latest_version;    // newest version on the writer's host
  uint64_t confirmed_age_ns;  // how long ago the writer confirmed it (a duration:
                              // clocks of different hosts are not compared)
  // A managed area's budget (0: not managed) and what waits to be sent.
  uint64_t managed_budget_bytes_per_s;
  uint32_t managed_max_line_age;
  uint32_t managed_element;
  uint64_t managed_residual_lines;
  uint64_t managed_oldest_lag;
  uint64_t managed_residual_version;  // the version those two are as of
};

enum class DropReason : uint8_t {
  kNone = 0,
  kTruncated,       // shorter than a header, or than payload_bytes says
  kOversized,       // longer than the header says
  kBadMagic,
  kBadVersion,      // protocol version
  kBadType,
  kBadChecksum,
  kBadLayout,       // payload inconsistent with its type (runs, sizes, seq >= frame_count)
  kUnknownHost,     // source not in the cluster (checked by the daemon)
  kUnknownArea,     // area not known or not subscribed (daemon)
  kOutOfRange,      // lines outside the area (daemon)
  kStaleVersion,    // older than what the receiver has (daemon)
  kDuplicate,       // a frame of the transfer already received (daemon)
  kBusy,            // receiver cannot take it now; the sender will resend (daemon)
  kUnconfirmed,     // the sender's incarnation is not (yet) confirmed by a hello (daemon)
  kUnauthenticated, // keys are set and its tag is missing or wrong, or it has a tag and they are not
  kUnknownKey,      // signed with a key this host does not hold (an old or a wrong one)
  kCount,
};
const char* DropReasonName(DropReason r);

// The run list of a DATA frame, read in place. Each run is loaded with memcpy,
// so the frame may start at any address: after Ethernet + IPv4 + UDP (42 bytes)
// a UDP payload is only 2-byte aligned in a DPDK mbuf, and a span<const Run>
// would read the caller's bytes as Run objects that do not exist there.
class RunList {
 public:
  class Iterator {
   public:
    // Yields runs by value: a C++20 forward iterator, a legacy input iterator.
    using iterator_concept = std::forward_iterator_tag;
    using iterator_category = std::input_iterator_tag;
    using value_type = Run;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Run;

    Iterator() = default;
    explicit Iterator(const uint8_t* at) : at_(at) {}
    Run operator*() const {
      Run r;
      std::memcpy(&r, at_, sizeof(Run));
      return r;
    }
    Iterator& operator++() {
      at_ += sizeof(Run);
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++*this;
      return before;
    }
    bool operator==(const Iterator&) const = default;

   private:
    const uint8_t* at_ = nullptr;
  };

  RunList() = default;
  RunList(const uint8_t* bytes, size_t count) : bytes_(bytes), count_(count) {}

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  Run operator[](size_t i) const { return *Iterator(bytes_ + i * sizeof(Run)); }
  Iterator begin() const { return Iterator(bytes_); }
  Iterator end() const { return Iterator(bytes_ + count_ * sizeof(Run)); }

 private:
  const uint8_t* bytes_ = nullptr;
  size_t count_ = 0;
};

// A validated frame: views into the caller's bytes.
struct Frame {
  Header header;
  RunList runs;                        // DATA
  std::span<const uint8_t> line_data;  // DATA: sum(line_count) * kLineBytes bytes
  std::span<const uint8_t> body;       // other types: the payload
};

// Validates `bytes` (the UDP payload) and fills `out`. Checks everything that
// needs no knowledge of areas or hosts: the header's magic, version, lengths
// and type, then the seal (`seal`'s keys, or the checksum), and only then the
// payload: for DATA that runs are ascending, non-overlapping, non-empty and
// that the payload holds exactly their lines. Never reads outside `bytes`; any
// alignment. `out` is written only when the result is kNone.
DropReason Decode(std::span<const uint8_t> bytes, const FrameSeal& seal, Frame* out);
// The same for a cluster without keys.
DropReason Decode(std::span<const uint8_t> bytes, Frame* out);

// Fills in payload_bytes and checksum of a frame without keys whose header
// and payload are already written at `frame` (header first), `payload_bytes`
// long, and whose payload goes on with `tail` when one is given (sent from
// where it is). FrameSeal::Seal does this with keys too.
void Seal(uint8_t* frame, uint32_t payload_bytes, std::span<const uint8_t> tail = {});

// A sink that can send a frame's last bytes from where they are instead of
// copying them into the frame: sink.CommitWithTail(frame_bytes, tail) hands
// over the `frame_bytes` written at what Reserve returned, followed by `tail`.
template <typename Sink>
concept TailSink = requires(Sink& sink, size_t bytes, std::span<const uint8_t> tail) {
  sink.CommitWithTail(bytes, tail);
};

// Splits the marked lines of `lines` into DATA frames of at most
// `max_frame_bytes` (header and tag included), sealed by `seal` (without
// one: checksums), carrying content from `content`
// (the area's bytes at the version sent, rounded up to whole lines). `header`
// supplies every field except magic, protocol_version and type (the writer sets
// them for DATA) and run_count, seq, frame_count, payload_bytes and checksum.
// Runs of consecutive lines are packed in address order; a run that does not fit
// is split across frames. The framing depends only on `lines` and
// max_frame_bytes, so a frame written again is byte-identical to the original.
class DataFrameWriter {
 public:
  // Smallest frame that carries a line: header, one run, one line.
  static constexpr size_t kMinFrameBytes = sizeof(Header) + sizeof(Run) + kLineBytes;
  // Largest UDP payload over IPv4 (65535 - 20 - 8).
  static constexpr size_t kMaxFrameBytes = 65507;

  // A `max_frame_bytes` outside [kMinFrameBytes (+ kTagBytes with keys),
  // kMaxFrameBytes] makes a writer that is not ok(): it counts 0 frames and
  // writes none.
  DataFrameWriter(size_t max_frame_bytes, const Header& header, FrameSeal* seal = nullptr);

  bool ok() const {
    return max_frame_bytes_ >= kMinFrameBytes + (header_bytes_ - sizeof(Header)) &&
           max_frame_bytes_ <= kMaxFrameBytes;
  }

  // Frames needed for `lines` (the frame_count every frame will carry). 0 when
  // `lines` is empty or the writer is not ok().
  uint32_t CountFrames(const LineSet& lines) const;

  // The framing of `lines`, computed once: for sending a large transfer in
  // bursts (and resending single frames) without repacking it every time.
  struct Plan {
    std::vector<Run> runs;              // every frame's runs, back to back
    std::vector<uint32_t> frame_start;  // frame i has runs[frame_start[i] .. frame_start[i+1])
    std::vector<uint32_t> lines_before;  // lines in frames before frame i (one more entry: all)
    uint32_t frames() const { return frame_start.empty() ? 0 : static_cast<uint32_t>(frame_start.size() - 1); }
    std::span<const Run> FrameRuns(uint64_t seq) const {
      return std::span<const Run>(runs).subspan(frame_start[seq],
                                                frame_start[seq + 1] - frame_start[seq]);
    }
  };
  Plan MakePlan(const LineSet& lines) const;
  // The same plan from the lines' runs in address order (elements with
  // first_line and line_count, as LineRun): a staged version's.
  template <typename RunList>
  Plan MakePlanOfRuns(const RunList& runs) const;
  // Writes frames [first_seq, first_seq + count) of `plan` (same bytes as Write).
  template <typename Sink>
  uint32_t WritePlanned(const Plan& plan, const uint8_t* content, uint32_t first_seq,
                        uint32_t count, Sink& sink) const;
  // The same frames, byte for byte, from `compact`: the planned lines' bytes
  // back to back in address order (a staged version's gathered lines). A
  // frame's lines are then one stretch, which a TailSink sends from there.
  template <typename Sink>
  uint32_t WriteCompact(const Plan& plan, const uint8_t* compact, uint32_t first_seq,
                        uint32_t count, Sink& sink) const;

  // Writes each frame through `sink`: sink.Reserve(max_frame_bytes) returns a
  // buffer, sink.Commit(bytes) hands over the finished frame. A TailSink gets
  // the lines of a frame with one run as its tail, uncopied. Returns frames
  // written. If Reserve returns nullptr, writing stops there (frames seq 0..n-1
  // were written; WriteRange can send the rest later).
  template <typename Sink>
  uint32_t Write(const LineSet& lines, const uint8_t* content, Sink& sink) const;

  // Writes only frames whose seq is in [first_seq, first_seq + count): for
  // retransmitting what a receiver reports missing. Same framing as Write.
  template <typename Sink>
  uint32_t WriteRange(const LineSet& lines, const uint8_t* content, uint32_t first_seq,
                      uint32_t count, Sink& sink) const;

  size_t max_frame_bytes() const { return max_frame_bytes_; }

 private:
  // Calls fn(runs) for each frame in seq order, with the runs it carries.
  template <typename Fn>
  void PackFrames(const LineSet& lines, Fn&& fn) const {
    PackRuns([&](auto&& run) { lines.ForEachRun(run); }, fn);
  }
  // The same for runs listed by for_each_run(fn(first_line, count)).
  template <typename ForEachRun, typename Fn>
  void PackRuns(ForEachRun&& for_each_run, Fn&& fn) const;
  // Appends a frame's runs to `plan`.
  static void AddToPlan(std::span<const Run> runs, Plan* plan);
  static void EndPlan(Plan* plan);
  // The header of frame `seq`, unsealed.
  void WriteHeader(uint8_t* frame, uint16_t run_count, uint32_t seq, uint32_t frame_count) const;
  // Writes one sealed frame at `frame`; returns its size.
  size_t FillFrame(uint8_t* frame, std::span<const Run> runs, const uint8_t* content, uint32_t seq,
                   uint32_t frame_count) const;
  // Writes the header and the runs of a frame whose lines are `tail` (sealed
  // over both); returns the bytes written at `frame`.
  size_t FillHead(uint8_t* frame, std::span<const Run> runs, std::span<const uint8_t> tail,
                  uint32_t seq, uint32_t frame_count) const;

  // Seals a written frame.
  void SealFrame(uint8_t* frame, uint32_t payload_bytes, std::span<const uint8_t> tail = {}) const;

  size_t max_frame_bytes_;
  Header header_;
  FrameSeal* seal_;      // nullptr: checksums
  size_t header_bytes_;  // where the payload starts
};

}  // namespace dsm::wire

#include "coherence/wire_format_inl.h"

#endif  // DSM_COHERENCE_WIRE_FORMAT_H_
