// What a daemon puts on the wire for a known change, captured with DPDK's
// net_pcap: no namespaces, no root. One dsmd (host 1) runs on
//   net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap,infinite_rx=1
// in.pcap holds frames "from host 2" (a host that exists only as these frames),
// replayed in a loop: a HEARTBEAT, SUBSCRIBEs to areas 0 and 1, and an ACK of
// area 0 claiming version 1. A writer process changes known lines; afterwards
// every frame in out.pcap must be well-formed Ethernet/IPv4/UDP to host 2 and
// decode, and the DATA frames must carry exactly the changes:
//
// - area 0 ("pcap/delta", 256 KiB, acknowledged at version 1): version 1 and
//   version 2 each change the same known set L of lines (single lines, a run
//   across a page boundary, a run longer than a frame, the last line). The
//   version-2 delta (base 1) must carry exactly L, with version 2's bytes, in
//   as many frames as DataFrameWriter packs L into.
// - area 1 ("pcap/full", 16 KiB - 40 bytes, never acknowledged, so the daemon
//   resends the whole area at its newest version every retransmission
//   timeout): a full transfer of version 1 must reassemble to exactly the
//   bytes the writer wrote, the partial last line sent whole with zeros.
//
// Why area 0's version 1 changes L too: the replayed ACK(1) arrives as soon as
// the daemon sent its first transfer, which is the whole area at version 0
// (the subscription is there before the area exists, so the daemon exports
// it at once). The sender then counts the host as holding version 1 but still
// owes it everything changed since the version it really sent (0): lines
// changed by version 1 outside L would (rightly) be in the "base 1" delta.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/wire_format.h"
#include "dsm/dsm.h"
#include "tests/multihost/pcap_file.h"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm {
namespace {

using testing::DsmdProcess;
using testing::Mac;
using testing::PcapContents;
using testing::Reap;
using testing::Shared;
using testing::Spawn;
using testing::UdpEndpoint;

// The cluster: host 1 is the daemon under test, host 2 exists only in in.pcap.
constexpr uint16_t kSelf = 1;
constexpr uint16_t kPeer = 2;
constexpr Mac kSelfMac = {0x02, 0x00, 0xc6, 0x12, 0x00, 0x01};
constexpr Mac kPeerMac = {0x02, 0x00, 0xc6, 0x12, 0x00, 0x02};
constexpr uint32_t kSelfIp = (198u << 24) | (18u << 16) | 1;  // 198.18.0.1
constexpr uint32_t kPeerIp = (198u << 24) | (18u << 16) | 2;  // 198.18.0.2
constexpr uint16_t kPort = 7400;
constexpr uint32_t kMtu = 1500;
constexpr size_t kMaxFrameBytes = kMtu - 28;  // IPv4 + UDP headers
constexpr uint32_t kPeerIncarnation = 0x5eed0002;

// Areas, in allocation order on a fresh daemon: index 0 and 1, generation 1.
constexpr const char* kDeltaName = "pcap/delta";
constexpr uint32_t kDeltaIndex = 0;
constexpr size_t kDeltaBytes = 256 << 10;
constexpr const char* kFullName = "pcap/full";
constexpr uint32_t kFullIndex = 1;
constexpr size_t kFullBytes = (16 << 10) - 40;  // the last line is partial
constexpr uint32_t kGeneration = 1;
constexpr uint64_t kPeerAckedVersion = 1;

constexpr size_t LinesOf(size_t bytes) { return (bytes + kLineBytes - 1) / kLineBytes; }

// L: the lines area 0's versions 1 and 2 change (first line, count). Pages are
// 64 lines: 1020..1030 crosses the page boundary at 1024, 2040..2079 the one at
// 2048 and is longer than the 21 lines of a 1472-byte frame; 4095 is the last.
const std::vector<std::pair<uint32_t, uint32_t>>& ChangedRuns() {
  static const std::vector<std::pair<uint32_t, uint32_t>> runs = {
      {0, 1}, {5, 1}, {100, 1}, {777, 1}, {1020, 11}, {2040, 40}, {4095, 1}};
  return runs;
}

std::set<uint32_t> ChangedLines() {
  std::set<uint32_t> lines;
  for (auto [first, count] : ChangedRuns()) {
    for (uint32_t l = first; l < first + count; ++l) lines.insert(l);
  }
  return lines;
}

// Content tags: every 8-byte word is (tag << 48) | word index, so a line in the
// wrong place, of the wrong version or of the wrong area shows.
constexpr uint64_t kDeltaV1Tag = 0xd1;
constexpr uint64_t kDeltaV2Tag = 0xd2;
constexpr uint64_t kFullV1Tag = 0xf1;

void FillLine(uint8_t* area, uint32_t line, uint64_t tag) {
  for (size_t w = 0; w < kLineBytes / 8; ++w) {
    const uint64_t word_index = (uint64_t{line} * kLineBytes) / 8 + w;
    const uint64_t v = (tag << 48) | word_index;
    std::memcpy(area + line * kLineBytes + w * 8, &v, 8);
  }
}

// The bytes of an area at a version, rounded up to whole lines: what the
// writer wrote (everything else is zero).
std::vector<uint8_t> ExpectedContent(uint32_t area_index, uint64_t version) {
  const size_t bytes = area_index == kDeltaIndex ? kDeltaBytes : kFullBytes;
  std::vector<uint8_t> c(LinesOf(bytes) * kLineBytes, 0);
  if (area_index == kDeltaIndex && (version == 1 || version == 2)) {
    for (uint32_t l : ChangedLines())
      FillLine(c.data(), l, version == 1 ? kDeltaV1Tag : kDeltaV2Tag);
  } else if (area_index == kFullIndex && version == 1) {
    std::vector<uint8_t> whole(LinesOf(bytes) * kLineBytes);
    for (uint32_t l = 0; l < LinesOf(bytes); ++l) FillLine(whole.data(), l, kFullV1Tag);
    std::memcpy(c.data(), whole.data(), bytes);  // the tail of the last line stays 0
  }
  return c;
}

// ---- frames "from host 2" -------------------------------------------------

std::vector<uint8_t> PeerFrame(wire::FrameType type, uint32_t area_index, uint64_t version,
                               std::span<const uint8_t> body) {
  std::vector<uint8_t> payload(sizeof(wire::Header) + body.size());
  wire::Header h{};
  h.magic = wire::kMagic;
  h.protocol_version = wire::kProtocolVersion;
  h.type = static_cast<uint8_t>(type);
  h.source_host = kPeer;
  h.dest_host = kSelf;
  h.incarnation = kPeerIncarnation;  // the first heard, so believed without a hello
  if (type == wire::FrameType::kSubscribe || type == wire::FrameType::kAck) {
    h.area_index = area_index;
    h.area_generation = kGeneration;
  }
  h.version = version;  // ACK: the complete version; flags 0, no missing ranges
  std::memcpy(payload.data(), &h, sizeof(h));
  if (!body.empty()) std::memcpy(payload.data() + sizeof(h), body.data(), body.size());
  wire::Seal(payload.data(), static_cast<uint32_t>(body.size()));
  return testing::BuildUdpFrame({kPeerMac, kPeerIp, kPort}, {kSelfMac, kSelfIp, kPort}, payload);
}

std::vector<std::vector<uint8_t>> PeerFrames() {
  wire::HeartbeatBody hb{};
  hb.sent_ns = 1'000'000'000;
  const auto hb_bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&hb), sizeof(hb));
  return {PeerFrame(wire::FrameType::kHeartbeat, 0, 0, hb_bytes),
          PeerFrame(wire::FrameType::kSubscribe, kDeltaIndex, 0, {}),
          PeerFrame(wire::FrameType::kSubscribe, kFullIndex, 0, {}),
          PeerFrame(wire::FrameType::kAck, kDeltaIndex, kPeerAckedVersion, {})};
}

// ---- what host 1 sent -----------------------------------------------------

struct DataFrame {
  size_t record = 0;  // index in out.pcap
  wire::Header header{};
  std::vector<wire::Run> runs;
  std::vector<uint8_t> line_data;
  std::vector<uint8_t> raw;  // the UDP payload
};

struct TransferFrames {
  std::map<uint32_t, DataFrame> by_seq;  // first copy of each seq
  bool complete() const {
    const uint32_t n = by_seq.begin()->second.header.frame_count;
    return by_seq.size() == n && by_seq.rbegin()->first == n - 1;
  }
  const wire::Header& header() const { return by_seq.begin()->second.header; }
};

struct Capture {
  std::vector<std::string> problems;  // frames that are not what host 1 may send
  std::map<uint8_t, uint64_t> frames_by_type;
  std::vector<DataFrame> data;
  std::map<std::pair<uint32_t, uint32_t>, TransferFrames> transfers;  // (area, transfer_id)
  // Each name's entry in the last DIRECTORY frame that listed it (a sealed
  // area, whose writer is gone, is no longer listed).
  std::map<std::string, wire::DirectoryEntry> directory;
  size_t records = 0;

  // Complete transfers of `area` at `version` with or without kFlagFull.
  std::vector<const TransferFrames*> Complete(uint32_t area, uint64_t version, bool full) const {
    std::vector<const TransferFrames*> out;
    for (const auto& [key, t] : transfers) {
      const wire::Header& h = t.header();
      if (key.first == area && h.version == version && ((h.flags & wire::kFlagFull) != 0) == full &&
          t.complete()) {
        out.push_back(&t);
      }
    }
    return out;
  }
  size_t CompleteFull(uint32_t area) const {
    return Complete(area, 0, true).size() + Complete(area, 1, true).size();
  }
};

std::string Where(size_t record) { return "out.pcap record " + std::to_string(record); }

Capture Analyze(const PcapContents& pcap) {
  Capture cap;
  cap.records = pcap.frames.size();
  for (size_t i = 0; i < pcap.frames.size(); ++i) {
    const std::vector<uint8_t>& bytes = pcap.frames[i];
    const testing::ParsedUdpFrame p = testing::ParseUdpFrame(bytes);
    if (!p.ok) {
      cap.problems.push_back(Where(i) + ": " + p.error);
      continue;
    }
    if (p.src.mac != kSelfMac || p.dst.mac != kPeerMac || p.src.ipv4 != kSelfIp ||
        p.dst.ipv4 != kPeerIp || p.src.port != kPort || p.dst.port != kPort) {
      cap.problems.push_back(Where(i) + ": " + testing::FormatMac(p.src.mac) + " " +
                             testing::FormatIpv4(p.src.ipv4) + ":" + std::to_string(p.src.port) +
                             " -> " + testing::FormatMac(p.dst.mac) + " " +
                             testing::FormatIpv4(p.dst.ipv4) + ":" + std::to_string(p.dst.port) +
                             ", expected host 1 -> host 2 unicast on port 7400");
      continue;
    }
    if (!p.dont_fragment || p.udp_checksum != 0 || p.ttl == 0) {
      cap.problems.push_back(Where(i) + ": expected DF set, UDP checksum 0, TTL > 0");
    }
    if (p.payload.size() > kMaxFrameBytes) {
      cap.problems.push_back(Where(i) + ": UDP payload of " + std::to_string(p.payload.size()) +
                             " bytes exceeds the MTU's " + std::to_string(kMaxFrameBytes));
    }
    wire::Frame f;
    const wire::DropReason r = wire::Decode(p.payload, &f);
    if (r != wire::DropReason::kNone) {
      cap.problems.push_back(Where(i) + ": Decode says " + wire::DropReasonName(r));
      continue;
    }
    if (f.header.source_host != kSelf || f.header.dest_host != kPeer) {
      cap.problems.push_back(Where(i) + ": header says host " +
                             std::to_string(f.header.source_host) + " -> " +
                             std::to_string(f.header.dest_host));
    }
    ++cap.frames_by_type[f.header.type];
    if (f.header.type == static_cast<uint8_t>(wire::FrameType::kDirectory)) {
      for (size_t e = 0; e < f.body.size() / sizeof(wire::DirectoryEntry); ++e) {
        wire::DirectoryEntry d;
        std::memcpy(&d, f.body.data() + e * sizeof(d), sizeof(d));
        cap.directory[std::string(d.name, strnlen(d.name, sizeof(d.name)))] = d;
      }
    }
    if (f.header.type != static_cast<uint8_t>(wire::FrameType::kData)) continue;
    DataFrame d;
    d.record = i;
    d.header = f.header;
    d.runs.assign(f.runs.begin(), f.runs.end());
    d.line_data.assign(f.line_data.begin(), f.line_data.end());
    d.raw.assign(p.payload.begin(), p.payload.end());
    const std::pair<uint32_t, uint32_t> key{uint32_t{f.header.area_index},
                                            uint32_t{f.header.transfer_id}};
    auto& t = cap.transfers[key];
    if (!t.by_seq.empty()) {
      const wire::Header& first = t.header();
      if (first.version != d.header.version || first.base_version != d.header.base_version ||
          first.flags != d.header.flags || first.frame_count != d.header.frame_count ||
          first.area_generation != d.header.area_generation) {
        cap.problems.push_back(Where(i) + ": transfer " + std::to_string(f.header.transfer_id) +
                               " of area " + std::to_string(f.header.area_index) +
                               " changes version/base/flags/frame_count between frames");
      }
      auto same = t.by_seq.find(uint32_t{d.header.seq});
      if (same != t.by_seq.end() && same->second.raw != d.raw) {
        cap.problems.push_back(Where(i) + ": seq " + std::to_string(d.header.seq) +
                               " sent again with different bytes (first at " +
                               Where(same->second.record) + ")");
      }
    }
    t.by_seq.emplace(uint32_t{d.header.seq}, d);
    cap.data.push_back(std::move(d));
  }
  return cap;
}

// Reassembles a complete transfer; appends problems (overlaps, lines past the end).
std::vector<uint8_t> Reassemble(const TransferFrames& t, size_t area_bytes,
                                std::set<uint32_t>* lines, std::vector<std::string>* problems) {
  const size_t n = LinesOf(area_bytes);
  std::vector<uint8_t> content(n * kLineBytes, 0);
  for (const auto& [seq, f] : t.by_seq) {
    size_t at = 0;
    for (const wire::Run& run : f.runs) {
      for (uint32_t l = run.first_line; l < run.first_line + run.line_count;
           ++l, at += kLineBytes) {
        if (l >= n) {
          problems->push_back(Where(f.record) + ": line " + std::to_string(l) +
                              " past the area's " + std::to_string(n));
          continue;
        }
        if (!lines->insert(l).second) {
          problems->push_back(Where(f.record) + ": line " + std::to_string(l) +
                              " carried twice in transfer " + std::to_string(f.header.transfer_id));
        }
        std::memcpy(content.data() + l * kLineBytes, f.line_data.data() + at, kLineBytes);
      }
    }
  }
  return content;
}

std::string LinesText(const std::set<uint32_t>& lines) {
  std::string s;
  size_t shown = 0;
  for (uint32_t l : lines) {
    if (++shown > 40) return s + " ...";
    s += (s.empty() ? "" : ",") + std::to_string(l);
  }
  return s;
}

// First differing line between two contents, or -1.
long FirstDifferentLine(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t l = 0; l * kLineBytes < a.size(); ++l) {
    if (std::memcmp(a.data() + l * kLineBytes, b.data() + l * kLineBytes, kLineBytes) != 0) {
      return static_cast<long>(l);
    }
  }
  return -1;
}

uint32_t ExpectedFrameCount(const std::set<uint32_t>& lines, size_t area_bytes) {
  LineSet set(area_bytes);
  for (uint32_t l : lines) set.AddLines(l, 1);
  wire::DataFrameWriter writer(kMaxFrameBytes, wire::Header{});
  return writer.CountFrames(set);
}

// Polls out.pcap (flushed by net_pcap after every TX burst) until `done`.
template <typename Pred>
bool WaitForCapture(const std::string& path, Pred done, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const PcapContents pcap = testing::ReadPcap(path);
    if (pcap.ok && done(Analyze(pcap))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// ---- the writer process ---------------------------------------------------

struct Board {
  std::atomic<int> stage{0};  // writer: 1 allocated, 2 version 1 out, 3 version 2 out
  std::atomic<int> go{0};     // test: the writer may take step go + 1
  char error[256] = {};
};

int Fail(Board* b, int code, const char* what) {
  std::snprintf(b->error, sizeof(b->error), "%s: %s (%s)", what, dsm_last_error(),
                std::strerror(errno));
  return code;
}

int PublishOnce(const void* p) {
  int rc;
  for (int i = 0; (rc = dsm_publish(p)) == DSM_ERR_BUSY && i < 10000; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return rc;
}

int Writer(Board* b) {
  if (dsm_init(nullptr) != DSM_OK) return Fail(b, 10, "dsm_init");
  void* dp = nullptr;
  void* fp = nullptr;
  if (dsm_alloc(kDeltaName, kDeltaBytes, nullptr, &dp) != DSM_OK) return Fail(b, 11, "alloc delta");
  if (dsm_alloc(kFullName, kFullBytes, nullptr, &fp) != DSM_OK) return Fail(b, 12, "alloc full");
  auto* delta = static_cast<uint8_t*>(dp);
  auto* full = static_cast<uint8_t*>(fp);
  b->stage = 1;
  if (!testing::WaitFor([&] { return b->go >= 1; }, 30000)) return Fail(b, 13, "wait go 1");

  // Version 1: L in area 0, the whole of area 1.
  for (uint32_t l : ChangedLines()) {
    FillLine(delta, l, kDeltaV1Tag);
    if (dsm_log(delta + l * kLineBytes, kLineBytes) != DSM_OK) return Fail(b, 14, "log delta v1");
  }
  if (PublishOnce(dp) != DSM_OK || dsm_version(dp) != 1) return Fail(b, 15, "publish delta v1");
  const std::vector<uint8_t> full_v1 = ExpectedContent(kFullIndex, 1);
  std::memcpy(full, full_v1.data(), kFullBytes);
  if (dsm_log(full, kFullBytes) != DSM_OK) return Fail(b, 16, "log full v1");
  if (PublishOnce(fp) != DSM_OK || dsm_version(fp) != 1) return Fail(b, 17, "publish full v1");
  b->stage = 2;
  if (!testing::WaitFor([&] { return b->go >= 2; }, 30000)) return Fail(b, 18, "wait go 2");

  // Version 2: L again, new content.
  for (uint32_t l : ChangedLines()) {
    FillLine(delta, l, kDeltaV2Tag);
    if (dsm_log(delta + l * kLineBytes, kLineBytes) != DSM_OK) return Fail(b, 19, "log delta v2");
  }
  if (PublishOnce(dp) != DSM_OK || dsm_version(dp) != 2) return Fail(b, 20, "publish delta v2");
  if (std::memcmp(delta, ExpectedContent(kDeltaIndex, 2).data(), kDeltaBytes) != 0) {
    return Fail(b, 21, "delta content differs from the expected version 2");
  }
  b->stage = 3;
  if (!testing::WaitFor([&] { return b->go >= 3; }, 30000)) return Fail(b, 22, "wait go 3");
  if (dsm_fini() != DSM_OK) return Fail(b, 23, "dsm_fini");
  return 0;
}

std::string RunDsmctl(const std::string& socket) {
  const char* env = std::getenv("DSM_DSMCTL");
  const std::string bin = env && *env ? env : "dsmctl";
  const std::string cmd = "'" + bin + "' --socket '" + socket + "' --json all 2>&1";
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    pclose(f);
  }
  return out;
}

class PcapCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsm-pcap-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    in_ = dir_ + "/in.pcap";
    out_ = dir_ + "/out.pcap";
    cluster_ = dir_ + "/cluster.toml";
  }
  void TearDown() override {
    if (HasFailure()) {
      std::printf("keeping %s (in.pcap, out.pcap, cluster.toml) for inspection\n", dir_.c_str());
    } else {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  std::string dir_, in_, out_, cluster_;
};

TEST_F(PcapCaptureTest, FramesForAKnownChangeDecodeToExactlyThatChange) {
  std::string error;
  ASSERT_TRUE(testing::WritePcap(in_, PeerFrames(), &error)) << error;
  {
    std::ofstream c(cluster_);
    c << "[cluster]\nudp_port = " << kPort << "\nmtu = " << kMtu << "\nmulticast = false\n\n"
      << "[[host]]\nid = 1\nmac = \"02:00:c6:12:00:01\"\nip = \"198.18.0.1\"\n"
      << "device = \"net_pcap0,rx_pcap=" << in_ << ",tx_pcap=" << out_ << ",infinite_rx=1\"\n\n"
      << "[[host]]\nid = 2\nmac = \"02:00:c6:12:00:02\"\nip = \"198.18.0.2\"\n"
      << "device = \"net_null0\"  # never opened: host 2 is the frames in in.pcap\n";
    ASSERT_TRUE(c.good());
  }
  DsmdProcess daemon({"--cluster", cluster_, "--host-id", "1", "--log-level", "info"});
  ASSERT_TRUE(daemon.ok()) << "dsmd did not start on net_pcap (see its log above)";
  daemon.ExportSocket();

  Shared<Board> board;
  const pid_t writer = Spawn([&] { return Writer(&*board); });
  auto writer_at = [&](int stage) {
    return testing::WaitFor([&] { return board->stage >= stage; }, 10000);
  };
  bool steps_ok = false;
  [&] {
    ASSERT_TRUE(writer_at(1)) << "writer did not allocate: " << board->error;
    // Both subscriptions served: a whole-area transfer of each (version 0).
    ASSERT_TRUE(WaitForCapture(
        out_,
        [](const Capture& c) {
          return c.CompleteFull(kDeltaIndex) > 0 && c.CompleteFull(kFullIndex) > 0;
        },
        10000))
        << "no complete whole-area transfer of both areas in out.pcap";
    // The replayed ACK(1) comes in the next loop turn; leave it a margin.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    board->go = 1;
    ASSERT_TRUE(writer_at(2)) << "writer did not publish version 1: " << board->error;
    ASSERT_TRUE(WaitForCapture(
        out_, [](const Capture& c) { return !c.Complete(kFullIndex, 1, true).empty(); }, 10000))
        << "area 1's version 1 was never sent whole (it is resent every RTO)";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    board->go = 2;
    ASSERT_TRUE(writer_at(3)) << "writer did not publish version 2: " << board->error;
    ASSERT_TRUE(WaitForCapture(
        out_, [](const Capture& c) { return !c.Complete(kDeltaIndex, 2, false).empty(); }, 10000))
        << "no complete version-2 delta of area 0 in out.pcap";
    // A few retransmission timeouts more: host 2 never acknowledges version 2.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    steps_ok = true;
  }();
  board->go = 3;
  EXPECT_EQ(Reap(writer, 30000), 0) << board->error;
  const std::string dsmctl = RunDsmctl(daemon.socket_path());
  const int status = daemon.Stop();  // closes the port: out.pcap is complete
  // A clean SIGTERM shutdown (docs/design.md, Failures), not death by the signal.
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "dsmd did not shut down cleanly on SIGTERM: "
      << (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                              : "wait status " + std::to_string(status))
      << " (a thread that does not block SIGTERM, e.g. DPDK's eal-intr-thread, took it?)";
  ASSERT_TRUE(steps_ok);

  // The daemon's own view: our frames passed the transport and Decode.
  const nlohmann::json j = nlohmann::json::parse(dsmctl, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "dsmctl --json all:\n" << dsmctl;
  const auto& ctr = j["counters"];
  std::printf("dsmd counters: %s\n", ctr.dump().c_str());
  EXPECT_GT(ctr["rx_frames"].get<uint64_t>(), 0u);
  EXPECT_EQ(ctr["rx_dropped_malformed"].get<uint64_t>(), 0u);
  EXPECT_EQ(ctr["rx_dropped_not_for_us"].get<uint64_t>(), 0u);
  EXPECT_EQ(ctr["rx_dropped_unknown_source"].get<uint64_t>(), 0u);
  for (const char* r : {"truncated", "oversized", "bad_magic", "bad_version", "bad_type",
                        "bad_checksum", "bad_layout", "unknown_host"}) {
    EXPECT_EQ(ctr["dropped"].value(r, uint64_t{1}), 0u) << "frames from in.pcap dropped as " << r;
  }
  EXPECT_EQ(ctr["tx_dropped"].get<uint64_t>(), 0u);

  // ---- out.pcap ----
  const PcapContents pcap = testing::ReadPcap(out_);
  ASSERT_TRUE(pcap.ok) << pcap.error;
  EXPECT_EQ(pcap.linktype, testing::kLinktypeEthernet);
  EXPECT_EQ(pcap.trailing_bytes, 0u) << "out.pcap ends in a partial record";
  EXPECT_EQ(pcap.cut_records, 0u) << "records shorter than the frame (snaplen " << pcap.snaplen
                                  << ")";
  const Capture cap = Analyze(pcap);
  for (const std::string& p : cap.problems) ADD_FAILURE() << p;
  auto count = [&](wire::FrameType t) {
    auto it = cap.frames_by_type.find(static_cast<uint8_t>(t));
    return it == cap.frames_by_type.end() ? uint64_t{0} : it->second;
  };
  std::printf("out.pcap: %zu frames: %lu DATA in %zu transfers, %lu HEARTBEAT, %lu DIRECTORY\n",
              cap.records, static_cast<unsigned long>(count(wire::FrameType::kData)),
              cap.transfers.size(), static_cast<unsigned long>(count(wire::FrameType::kHeartbeat)),
              static_cast<unsigned long>(count(wire::FrameType::kDirectory)));
  EXPECT_GT(count(wire::FrameType::kHeartbeat), 0u);
  EXPECT_GT(count(wire::FrameType::kDirectory), 0u);
  // Host 1 replicates nothing, so it has nothing to acknowledge or subscribe to.
  EXPECT_EQ(count(wire::FrameType::kAck), 0u);
  EXPECT_EQ(count(wire::FrameType::kSubscribe), 0u);

  // The directory names both areas with the index/generation the frames use.
  std::map<std::string, wire::DirectoryEntry> dir = cap.directory;
  ASSERT_TRUE(dir.count(kDeltaName) && dir.count(kFullName)) << "no DIRECTORY listed the areas";
  EXPECT_EQ(dir[kDeltaName].area_index, kDeltaIndex);
  EXPECT_EQ(dir[kDeltaName].area_generation, kGeneration);
  EXPECT_EQ(dir[kDeltaName].size, kDeltaBytes);
  EXPECT_EQ(dir[kDeltaName].latest_version, 2u);
  EXPECT_EQ(dir[kFullName].area_index, kFullIndex);
  EXPECT_EQ(dir[kFullName].area_generation, kGeneration);
  EXPECT_EQ(dir[kFullName].size, kFullBytes);
  EXPECT_EQ(dir[kFullName].latest_version, 1u);

  // Every DATA frame, complete transfer or not: known area, lines in range,
  // bytes equal to the writer's at the frame's version.
  const std::set<uint32_t> L = ChangedLines();
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> frames_by_version;  // (area, version)
  for (const DataFrame& f : cap.data) {
    const wire::Header& h = f.header;
    const bool full = (h.flags & wire::kFlagFull) != 0;
    if ((h.area_index != kDeltaIndex && h.area_index != kFullIndex) ||
        h.area_generation != kGeneration) {
      ADD_FAILURE() << Where(f.record) << ": DATA for area " << h.area_index << " generation "
                    << h.area_generation;
      continue;
    }
    ++frames_by_version[{h.area_index, h.version}];
    const size_t area_bytes = h.area_index == kDeltaIndex ? kDeltaBytes : kFullBytes;
    if (h.version > (h.area_index == kDeltaIndex ? 2u : 1u)) {
      ADD_FAILURE() << Where(f.record) << ": version " << h.version << " was never published";
      continue;
    }
    if (h.area_index == kDeltaIndex && !full) {
      // The only delta area 0 may get: base 1 (what host 2 claims), version 2.
      EXPECT_EQ(h.version, 2u) << Where(f.record) << ": a delta of area 0 not at version 2";
      EXPECT_EQ(h.base_version, kPeerAckedVersion) << Where(f.record);
    }
    if (h.area_index == kFullIndex) {
      EXPECT_TRUE(full) << Where(f.record)
                        << ": area 1 is never acknowledged, so it is only "
                           "sent whole";
    }
    const std::vector<uint8_t> want = ExpectedContent(h.area_index, h.version);
    size_t at = 0;
    for (const wire::Run& run : f.runs) {
      for (uint32_t l = run.first_line; l < run.first_line + run.line_count;
           ++l, at += kLineBytes) {
        if (l >= LinesOf(area_bytes)) {
          ADD_FAILURE() << Where(f.record) << ": line " << l << " past the end of area "
                        << h.area_index;
          break;
        }
        if (h.area_index == kDeltaIndex && !full && !L.count(l)) {
          ADD_FAILURE() << Where(f.record) << ": line " << l << " is not in the change";
        }
        if (std::memcmp(f.line_data.data() + at, want.data() + l * kLineBytes, kLineBytes) != 0) {
          ADD_FAILURE() << Where(f.record) << ": area " << h.area_index << " line " << l
                        << " differs from the writer's version " << h.version;
        }
      }
    }
  }
  for (const auto& [key, n] : frames_by_version) {
    std::printf("  area %u version %lu: %lu DATA frames\n", key.first,
                static_cast<unsigned long>(key.second), static_cast<unsigned long>(n));
  }

  // Area 0, version 2: every complete transfer carries exactly L, in the
  // frames DataFrameWriter packs L into.
  const auto deltas = cap.Complete(kDeltaIndex, 2, false);
  ASSERT_FALSE(deltas.empty());
  const uint32_t delta_frames = ExpectedFrameCount(L, kDeltaBytes);
  EXPECT_GE(delta_frames, 3u) << "L should need several frames";
  for (const TransferFrames* t : deltas) {
    std::vector<std::string> problems;
    std::set<uint32_t> lines;
    const std::vector<uint8_t> got = Reassemble(*t, kDeltaBytes, &lines, &problems);
    for (const std::string& p : problems) ADD_FAILURE() << p;
    EXPECT_EQ(lines, L) << "transfer " << t->header().transfer_id << " carries lines "
                        << LinesText(lines) << "; the change is " << LinesText(L);
    EXPECT_EQ(t->header().frame_count, delta_frames) << "transfer " << t->header().transfer_id;
    std::vector<uint8_t> want(got.size(), 0);
    const std::vector<uint8_t> v2 = ExpectedContent(kDeltaIndex, 2);
    for (uint32_t l : L)
      std::memcpy(want.data() + l * kLineBytes, v2.data() + l * kLineBytes, kLineBytes);
    EXPECT_EQ(FirstDifferentLine(got, want), -1) << "transfer " << t->header().transfer_id;
  }
  std::printf(
      "area 0: %zu complete version-2 deltas of %u frames, each exactly the %zu changed lines\n",
      deltas.size(), delta_frames, L.size());

  // Whole-area transfers (area 0 at version 0, area 1 at 0 and 1): every line
  // exactly once, bytes as the writer's at that version.
  for (uint32_t area : {kDeltaIndex, kFullIndex}) {
    const size_t bytes = area == kDeltaIndex ? kDeltaBytes : kFullBytes;
    std::set<uint32_t> all;
    for (uint32_t l = 0; l < LinesOf(bytes); ++l) all.insert(l);
    for (uint64_t v : {0u, 1u}) {
      for (const TransferFrames* t : cap.Complete(area, v, true)) {
        std::vector<std::string> problems;
        std::set<uint32_t> lines;
        const std::vector<uint8_t> got = Reassemble(*t, bytes, &lines, &problems);
        for (const std::string& p : problems) ADD_FAILURE() << p;
        EXPECT_EQ(lines.size(), all.size())
            << "area " << area << " transfer " << t->header().transfer_id;
        EXPECT_TRUE(lines == all) << "area " << area << " whole-area transfer misses lines";
        EXPECT_EQ(t->header().frame_count, ExpectedFrameCount(all, bytes));
        EXPECT_EQ(FirstDifferentLine(got, ExpectedContent(area, v)), -1)
            << "area " << area << " version " << v << " transfer " << t->header().transfer_id;
      }
    }
  }
  EXPECT_FALSE(cap.Complete(kDeltaIndex, 0, true).empty()) << "area 0 was never sent whole";
  const auto full_v1 = cap.Complete(kFullIndex, 1, true);
  ASSERT_FALSE(full_v1.empty());
  std::printf(
      "area 1: %zu complete whole-area transfers of version 1, each byte-identical to the "
      "writer's %zu bytes (+%zu zero bytes of the last line)\n",
      full_v1.size(), kFullBytes, LinesOf(kFullBytes) * kLineBytes - kFullBytes);
}

}  // namespace
}  // namespace dsm
