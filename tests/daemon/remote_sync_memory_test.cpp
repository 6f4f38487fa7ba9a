// dsmd's RemoteSync end to end in one process: three hosts set up as dsmd
// sets them up, joined by a net::MemoryWire, driven by one fake clock. A
// writer on host 1 (libdsm's WriterArea: the real publish and export
// protocol) publishes a seeded sequence of versions; readers on hosts 2 and
// 3 attach the area by name as a client would (asking for a replica while
// the name is not found there), keep the snapshot they check pinned, and
// check every line of every snapshot they see against what the writer wrote
// for that version. Named runs cover multicast and unicast, a lossy,
// duplicating, reordering, corrupting wire (dsmd's fault flags) and a device
// that takes few frames per flush under a writer publishing every tick; a
// sweep of seeded scenarios mixes all of it.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dsm/dsm.h"
#include "libdsm/contract/control_protocol.h"
#include "libdsm/contract/publish_protocol.h"
#include "libdsm/writer_area.h"
#include "tests/daemon/in_process_host.h"
#include "tests/support/dsm_helpers.h"
#include "tests/support/env.h"

namespace dsm {
namespace {

using ::dsm::testing::EnvOr;

// Not a whole number of lines or pages: the last line is partial.
constexpr uint64_t kAreaBytes = 300'000;
constexpr size_t kLines = (kAreaBytes + kLineBytes - 1) / kLineBytes;
constexpr uint64_t kStepNs = 100'000;  // the fake clock's tick
// Bounds of one run: fake time and the wall clock.
constexpr uint64_t kMaxTicks = 100'000;  // 10 s of fake time
constexpr auto kMaxWallTime = std::chrono::seconds(30);
constexpr const char* kName = "model/w";
constexpr uint32_t kWriterClient = 100;
constexpr uint32_t kReaderClient = 200;

struct Scenario {
  std::string name;
  bool multicast = true;
  net::FaultConfig faults;  // on every host, each with its own seed
  net::MemoryWireOptions wire;
  uint32_t reader_buffers = 0;  // of the area (0: the default)
  uint32_t versions = 40;       // the writer publishes this many after the first
  uint64_t write_every_ns = 2'000'000;
  size_t lines_per_write = kLines * 3 / 200;  // and a third of them every 8th write
  // Snapshots each reader must have checked: at most one per version (a
  // version replaced before it arrived is skipped).
  uint32_t min_snapshots = 2;
  uint64_t seed = 1;  // which lines the writer changes
  // Hosts 1 (the writer's), 2 and 3: hugetlbfs (2 MiB pages) or memfd (4 KiB).
  std::array<BackingChoice, 3> backing{BackingChoice::kMemfd, BackingChoice::kMemfd,
                                       BackingChoice::kMemfd};
};

constexpr uint64_t kHostRegionBytes = 16ull << 20;

std::ostream& operator<<(std::ostream& os, const Scenario& s) { return os << s.name; }

std::string Describe(const Scenario& s) {
  std::ostringstream os;
  os << (s.multicast ? "multicast" : "unicast") << ", drop " << s.faults.drop << " duplicate "
     << s.faults.duplicate << " reorder " << s.faults.reorder << " corrupt " << s.faults.corrupt
     << ", frames per flush " << s.wire.tx_frames_per_flush << ", tails in place "
     << s.wire.tails_in_place << ", buffers " << s.reader_buffers << ", versions " << s.versions
     << " every " << s.write_every_ns / 1000 << " us, " << s.lines_per_write << " lines each";
  return os.str();
}

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A reader of the area on one host, as a client process: attaches by name,
// keeps the snapshot it last checked pinned, as a reader keeps the buffer it
// maps, and moves to each newer version it finds.
struct Reader {
  InProcessHost* host = nullptr;
  bool attached = false;
  uint32_t index = 0;
  uint32_t slot = 0;
  uint32_t pinned = kNoBuffer;
  uint64_t version = 0;  // of the snapshot checked last
  uint32_t snapshots_checked = 0;
};

// What a run did, for the tests' coverage checks.
struct Outcome {
  uint64_t ticks = 0;
  uint32_t refused_busy = 0;
  uint32_t snapshots_checked = 0;  // by both readers
  RemoteCounters writer_host{};    // host 1's remote sync counters
  uint64_t bad_checksums = 0;      // DATA the readers' hosts dropped as damaged
};

// One scenario on three in-process hosts.
class ClusterRun {
 public:
  explicit ClusterRun(const Scenario& s) : s_(s), rng_(s.seed) {}
  ~ClusterRun() {
    writer_.reset();
    if (writer_copy_ != nullptr) munmap(writer_copy_, mapped_bytes_);
  }

  // Starts the hosts and the writer, then polls every host each tick of the
  // fake clock until both readers checked the writer's last version.
  void Run(Outcome* outcome);

 private:
  InProcessHost& host(uint16_t id) { return *hosts_[id - 1]; }
  void StartHosts();
  void AllocWriter(uint64_t now_ns);
  void WriteAndPublish(uint64_t now_ns, size_t lines);
  void CheckSnapshot(uint16_t host_id, const uint8_t* buffer, uint64_t version);
  void ReaderTurn(Reader& r, uint64_t now_ns);

  Scenario s_;
  std::unique_ptr<net::MemoryWire> wire_;
  std::vector<std::unique_ptr<InProcessHost>> hosts_;
  uint64_t mapped_bytes_ = 0;
  uint8_t* writer_copy_ = nullptr;
  std::unique_ptr<WriterArea> writer_;
  std::mt19937_64 rng_;
  uint64_t writes_ = 0;
  uint32_t busy_ = 0;
  // The model of the writer's versions: per line, which write it holds from
  // which version on; lines written since the last publish; every version.
  struct LineWrite {
    uint64_t version;
    uint64_t write;
  };
  std::vector<std::vector<LineWrite>> history_ = std::vector<std::vector<LineWrite>>(kLines);
  std::map<size_t, uint64_t> unpublished_;  // line -> write
  std::set<uint64_t> versions_;
};

// What write `write` of the run seeded `seed` puts into `line` (its bytes
// within the area).
void LineBytes(uint64_t seed, uint64_t write, size_t line, uint8_t* out) {
  const size_t begin = line * kLineBytes;
  const size_t end = std::min<size_t>(begin + kLineBytes, kAreaBytes);
  for (size_t at = begin; at < end; at += 8) {
    const uint64_t word = Mix(seed << 48 ^ write << 24 ^ at);
    std::memcpy(out + (at - begin), &word, std::min<size_t>(8, end - at));
  }
}

void ClusterRun::StartHosts() {
  wire_ = std::make_unique<net::MemoryWire>(s_.wire);
  const ClusterConfig cluster = MemoryCluster(3, s_.multicast);
  for (uint16_t id : {1, 2, 3}) {
    DaemonConfig config;
    config.host_id = id;
    config.region_bytes = kHostRegionBytes;
    config.backing = s_.backing[id - 1];
    config.faults = s_.faults;
    config.faults.seed = s_.faults.seed * 10 + id;
    std::string error;
    hosts_.push_back(InProcessHost::Start(config, cluster, wire_.get(), &error));
    ASSERT_NE(hosts_.back(), nullptr) << error;
  }
}

// Allocates the area on host 1 as dsmd does for dsm_alloc, and maps it as the
// writer's process does (at its fixed address, which must be free here).
void ClusterRun::AllocWriter(uint64_t now_ns) {
  Request req{};
  req.magic = kProtocolMagic;
  req.protocol_version = kProtocolVersion;
  req.type = RequestType::kAlloc;
  req.pid = getpid();
  std::snprintf(req.name, sizeof(req.name), "%s", kName);
  req.size = kAreaBytes;
  req.reader_buffers = s_.reader_buffers;
  const DirectoryResult r = host(1).directory().Alloc({kWriterClient, getpid()}, req, now_ns);
  ASSERT_EQ(r.status, 0) << r.message;
  AreaControl& a = host(1).area(r.area_index);
  mapped_bytes_ = a.mapped_size;
  void* spot = mmap(reinterpret_cast<void*>(a.addr), a.mapped_size, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(spot, reinterpret_cast<void*>(a.addr)) << "the area's address is in use here";
  writer_copy_ = static_cast<uint8_t*>(spot);
  writer_ = WriterArea::Map(&a, r.area_index, host(1).backing().fd, DSM_TRACK_LOG,
                            DSM_PAGE_TRACKER_AUTO, host(1).backing().page_bytes);
  ASSERT_NE(writer_, nullptr) << dsm_last_error();
}

// Writes `lines` seeded lines (every line when `lines` is all of them) and
// tries to publish. A publish refused busy keeps its lines for the next.
void ClusterRun::WriteAndPublish(uint64_t now_ns, size_t lines) {
  std::uniform_int_distribution<size_t> pick(0, kLines - 1);
  ++writes_;
  for (size_t i = 0; i < lines; ++i) {
    const size_t line = lines == kLines ? i : pick(rng_);
    LineBytes(s_.seed, writes_, line, writer_copy_ + line * kLineBytes);
    writer_->ThreadLog().MarkLines(line, 1);
    unpublished_[line] = writes_;
  }
  const int rc = writer_->Publish(now_ns);
  if (rc == DSM_ERR_BUSY) {
    ++busy_;
    return;
  }
  ASSERT_EQ(rc, DSM_OK) << dsm_last_error();
  const uint64_t version = writer_->version();
  for (const auto& [line, write] : unpublished_) history_[line].push_back({version, write});
  unpublished_.clear();
  versions_.insert(version);
}

// Every line of `buffer` against the writer's version `version`. Names the
// first few wrong lines and which version each holds instead.
void ClusterRun::CheckSnapshot(uint16_t host_id, const uint8_t* buffer, uint64_t version) {
  ASSERT_TRUE(versions_.count(version))
      << "host " << host_id << " shows version " << version << ", which the writer never published";
  size_t wrong = 0;
  std::ostringstream detail;
  uint8_t want[kLineBytes];
  for (size_t line = 0; line < kLines; ++line) {
    const size_t at = line * kLineBytes;
    const size_t bytes = std::min<size_t>(kLineBytes, kAreaBytes - at);
    const std::vector<LineWrite>& h = history_[line];
    // The last write published at or before `version` (version 1 wrote every line).
    auto it = std::upper_bound(h.begin(), h.end(), version,
                               [](uint64_t v, const LineWrite& w) { return v < w.version; });
    ASSERT_NE(it, h.begin());
    LineBytes(s_.seed, std::prev(it)->write, line, want);
    if (std::memcmp(buffer + at, want, bytes) == 0) continue;
    if (++wrong > 5) continue;
    uint64_t held = 0;
    for (const LineWrite& w : h) {
      LineBytes(s_.seed, w.write, line, want);
      if (std::memcmp(buffer + at, want, bytes) == 0) held = w.version;
    }
    detail << " line " << line << " holds "
           << (held != 0 ? "version " + std::to_string(held) + "'s bytes;"
                         : "bytes no version had;");
  }
  ASSERT_EQ(wrong, 0u) << "host " << host_id << ", version " << version << ": " << wrong << " of "
                       << kLines << " lines wrong:" << detail.str();
}

void ClusterRun::ReaderTurn(Reader& r, uint64_t now_ns) {
  if (!r.attached) {
    Request req{};
    std::snprintf(req.name, sizeof(req.name), "%s", kName);
    const DirectoryResult res = r.host->directory().Attach({kReaderClient, getpid()}, req);
    if (res.status == DSM_ERR_NOT_FOUND) {
      // What the control server does for a client's attach of a name it lacks.
      int status = 0;
      r.host->remote().RequestReplica(kName, now_ns, &status);
      ASSERT_EQ(status, DSM_ERR_NOT_FOUND);
      return;
    }
    ASSERT_EQ(res.status, 0) << res.message;
    r.attached = true;
    r.index = res.area_index;
    r.slot = res.reader_slot;
    ASSERT_TRUE(r.host->area(r.index).is_replica);
    ASSERT_EQ(r.host->area(r.index).mapped_size % r.host->backing().page_bytes, 0u)
        << "a replica is rounded up to its own host's backing page";
  }
  AreaControl& a = r.host->area(r.index);
  if (UnpackLatest(a.latest.load()).version <= r.version) return;
  LatestVersion latest{};
  if (!PinLatest(a, r.slot, r.pinned, &latest)) return;
  SetPin(a, r.slot, latest.buffer);  // lets go of the snapshot before
  r.pinned = latest.buffer;
  ASSERT_GT(latest.version, r.version) << "host " << r.host->id() << " went back in time";
  ASSERT_EQ(a.buffer_version[latest.buffer].load(), latest.version);
  CheckSnapshot(r.host->id(), r.host->Buffer(r.index, latest.buffer), latest.version);
  r.version = latest.version;
  ++r.snapshots_checked;
}

void ClusterRun::Run(Outcome* outcome) {
  ASSERT_NO_FATAL_FAILURE(StartHosts());
  uint64_t now = 1'000'000'000;
  ASSERT_NO_FATAL_FAILURE(AllocWriter(now));
  ASSERT_NO_FATAL_FAILURE(WriteAndPublish(now, kLines));
  ASSERT_EQ(writer_->version(), 1u);
  const uint64_t last_version = 1 + s_.versions;

  std::vector<Reader> readers(2);
  readers[0].host = &host(2);
  readers[1].host = &host(3);
  uint64_t next_write = now + s_.write_every_ns;
  const auto wall_deadline = std::chrono::steady_clock::now() + kMaxWallTime;
  auto done = [&] {
    for (const Reader& r : readers) {
      if (r.version != last_version) return false;
    }
    return true;
  };
  uint64_t ticks = 0;
  for (; ticks < kMaxTicks && !done(); ++ticks) {
    ASSERT_LT(std::chrono::steady_clock::now(), wall_deadline) << "at tick " << ticks;
    now += kStepNs;
    for (auto& h : hosts_) h->remote().Poll(now);
    if (now >= next_write && writer_->version() < last_version) {
      ASSERT_NO_FATAL_FAILURE(
          WriteAndPublish(now, writes_ % 8 == 0 ? kLines / 3 : s_.lines_per_write));
      next_write = now + s_.write_every_ns;
    }
    for (Reader& r : readers) ASSERT_NO_FATAL_FAILURE(ReaderTurn(r, now));
  }

  const RemoteCounters& out = host(1).segment().header.remote;
  for (const Reader& r : readers) {
    EXPECT_EQ(r.version, last_version)
        << "host " << r.host->id() << " after " << ticks << " ticks ("
        << ticks * kStepNs / 1'000'000 << " ms of fake time); writer's publishes refused busy "
        << busy_ << ", DATA frames out " << out.data_frames_out << ", resent "
        << out.retransmitted_frames;
    EXPECT_GE(r.snapshots_checked, s_.min_snapshots) << "host " << r.host->id();
  }
  EXPECT_EQ(writer_->version(), last_version);
  outcome->ticks = ticks;
  outcome->refused_busy = busy_;
  outcome->snapshots_checked = readers[0].snapshots_checked + readers[1].snapshots_checked;
  outcome->writer_host = out;
  for (uint16_t id : {2, 3}) {
    outcome->bad_checksums += host(id).segment().header.remote.dropped[static_cast<size_t>(
        wire::DropReason::kBadChecksum)];
  }
  // Frames read lines in place until the device takes them: a buffer given
  // back to the writer before then sends lines of another version.
  if (s_.faults.corrupt == 0) {
    EXPECT_EQ(outcome->bad_checksums, 0u) << "frames arrived damaged without injected corruption";
  }
}

void Print(const std::string& name, const Outcome& o) {
  const RemoteCounters& c = o.writer_host;
  std::printf(
      "[ %s ] %llu ms of fake time; snapshots checked %u; publishes refused busy %u; "
      "host 1: DATA out %llu, resent %llu, tails in place %llu, shadowed %llu, pins "
      "yielded %llu, faults %llu; hosts 2 and 3: bad checksums %llu\n",
      name.c_str(), static_cast<unsigned long long>(o.ticks * kStepNs / 1'000'000),
      o.snapshots_checked, o.refused_busy, static_cast<unsigned long long>(c.data_frames_out),
      static_cast<unsigned long long>(c.retransmitted_frames),
      static_cast<unsigned long long>(c.tx_tail_frames),
      static_cast<unsigned long long>(c.versions_shadowed),
      static_cast<unsigned long long>(c.pins_yielded),
      static_cast<unsigned long long>(c.faults_injected),
      static_cast<unsigned long long>(o.bad_checksums));
}

class RemoteSyncMemoryTest : public ::testing::TestWithParam<Scenario> {
 protected:
  void SetUp() override { spdlog::set_level(spdlog::level::warn); }
};

TEST_P(RemoteSyncMemoryTest, RemoteReadersSeeEveryLineOfEveryVersionTheWriterPublished) {
  const Scenario& s = GetParam();
  Outcome o;
  ClusterRun run(s);
  ASSERT_NO_FATAL_FAILURE(run.Run(&o));
  Print(s.name, o);
  EXPECT_GT(o.writer_host.transfers_sent, 1u);
  if (s.faults.drop > 0) {
    EXPECT_GT(o.writer_host.faults_injected, 0u);
    EXPECT_GT(o.writer_host.retransmitted_frames, 0u) << "frames were lost: some were resent";
  } else {
    EXPECT_EQ(o.writer_host.retransmitted_frames, 0u) << "nothing was lost";
    EXPECT_GT(o.writer_host.tx_tail_frames, 0u) << "lines are framed in place from the pin";
  }
  if (s.write_every_ns <= kStepNs) {
    EXPECT_GT(o.refused_busy, 0u) << "a writer publishing every tick finds its spares pinned";
    // Copied aside first while frames of it were still to go, or not
    // (AreaExportTest names each way).
    EXPECT_GT(o.writer_host.pins_yielded + o.writer_host.versions_shadowed, 0u)
        << "dsmd gave the writer its buffer back";
  }
}

const net::FaultConfig kLossy{
    .drop = 0.05, .duplicate = 0.02, .reorder = 0.02, .corrupt = 0.01, .seed = 1};

Scenario Named(std::string name, bool multicast, net::FaultConfig faults,
               net::MemoryWireOptions wire, uint32_t versions, uint64_t write_every_ns,
               uint32_t min_snapshots) {
  Scenario s;
  s.name = std::move(name);
  s.multicast = multicast;
  s.faults = faults;
  s.wire = wire;
  s.versions = versions;
  s.write_every_ns = write_every_ns;
  s.min_snapshots = min_snapshots;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Runs, RemoteSyncMemoryTest,
    ::testing::Values(
        // A writer every 2 ms over a lossless wire: every version reaches both hosts.
        Named("Multicast", true, {}, {}, 40, 2'000'000, 41),
        Named("Unicast", false, {}, {}, 40, 2'000'000, 41),
        // The device takes 8 frames per flush and the writer publishes every
        // tick: frames wait with their lines still read in place from the
        // pinned buffer while the writer wants that buffer back.
        Named("MulticastSlowDeviceBusyWriter", true, {}, {.tx_frames_per_flush = 8}, 200, kStepNs,
              2),
        Named("UnicastSlowDeviceBusyWriter", false, {}, {.tx_frames_per_flush = 8}, 200, kStepNs,
              2),
        Named("MulticastLossy", true, kLossy, {}, 40, 2'000'000, 2),
        Named("UnicastLossy", false, kLossy, {}, 40, 2'000'000, 2),
        Named("MulticastLossyBusyWriter", true, {.drop = 0.1, .reorder = 0.05, .seed = 2}, {}, 200,
              kStepNs, 2)),
    [](const ::testing::TestParamInfo<Scenario>& info) { return info.param.name; });

// Hosts whose backing pages differ (a cluster where some hosts have
// hugepages) replicate an area whose size is not a multiple of 2 MiB, from
// a 4 KiB-page writer to a 2 MiB-page reader and back the other way.
TEST(RemoteSyncMixedBacking, HostsWithDifferentBackingPagesReplicateEveryLine) {
  spdlog::set_level(spdlog::level::warn);
  const uint64_t pages_per_host = kHostRegionBytes >> 21;
  if (!testing::HugetlbfsMounted() || testing::FreeHugepages() < 2 * pages_per_host) {
    GTEST_SKIP() << "needs hugetlbfs on /dev/hugepages with " << 2 * pages_per_host
                 << " free 2 MiB pages (run scripts/setup.sh as root)";
  }
  constexpr BackingChoice kHuge = BackingChoice::kHugetlbfs;
  constexpr BackingChoice kSmall = BackingChoice::kMemfd;
  for (const auto& backing : {std::array{kSmall, kHuge, kSmall}, std::array{kHuge, kSmall, kHuge}}) {
    Scenario s = Named(backing[0] == kHuge ? "HugeWriterSmallReader" : "SmallWriterHugeReader",
                       true, {}, {}, 20, 2'000'000, 21);
    s.backing = backing;
    SCOPED_TRACE(s.name);
    Outcome o;
    ClusterRun run(s);
    ASSERT_NO_FATAL_FAILURE(run.Run(&o));
    Print(s.name, o);
  }
}

// A scenario drawn from `seed`: cast, faults, device speed, tails in place or
// copied, buffers, writer pace and change size.
Scenario Drawn(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto one_of = [&](auto... v) {
    const std::vector<std::common_type_t<decltype(v)...>> values{v...};
    return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
  };
  Scenario s;
  s.name = "seed " + std::to_string(seed);
  s.seed = seed;
  s.multicast = one_of(true, false);
  // Half the runs without faults: only those frame lines in place (the fault
  // injector copies every frame).
  if (one_of(true, false)) {
    s.faults.drop = one_of(0.0, 0.01, 0.05, 0.15);
    s.faults.duplicate = one_of(0.0, 0.02);
    s.faults.reorder = one_of(0.0, 0.03);
    s.faults.corrupt = one_of(0.0, 0.01);
  }
  s.faults.seed = seed;
  s.wire.tx_frames_per_flush = one_of(size_t{0}, size_t{4}, size_t{16}, size_t{64});
  s.wire.tails_in_place = one_of(true, true, false);
  s.reader_buffers = one_of(2u, 2u, 3u, 4u);
  s.versions = one_of(20u, 60u, 120u);
  s.write_every_ns = one_of(kStepNs, 3 * kStepNs, 2'000'000ull);
  s.lines_per_write = one_of(size_t{1}, kLines / 100, kLines / 10);
  s.min_snapshots = 1;  // a fast writer may finish before its first version arrives
  return s;
}

// DSM_REMOTE_SYNC_SEEDS scenarios from DSM_REMOTE_SYNC_SEED_BASE; a failure
// names its seed (DSM_REMOTE_SYNC_SEEDS=1 DSM_REMOTE_SYNC_SEED_BASE=<seed>
// runs it alone).
TEST(RemoteSyncMemorySweep, SeededScenariosKeepEveryReplicaEqualToTheWriter) {
  spdlog::set_level(spdlog::level::err);
  const uint64_t base = EnvOr("DSM_REMOTE_SYNC_SEED_BASE", 1);
  const uint64_t seeds = EnvOr("DSM_REMOTE_SYNC_SEEDS", 200);
  // A seed takes about 40 ms on 2 busy cores.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30) +
                        std::chrono::milliseconds(300) * seeds;
  Outcome total;
  uint64_t longest = 0;  // ticks of the longest run
  for (uint64_t seed = base; seed < base + seeds; ++seed) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the sweep is slow: at seed " << seed;
    const Scenario s = Drawn(seed);
    SCOPED_TRACE(s.name + ": " + Describe(s));
    Outcome o;
    {
      ClusterRun run(s);
      run.Run(&o);
    }
    if (HasFailure()) break;
    total.ticks += o.ticks;
    longest = std::max(longest, o.ticks);
    total.refused_busy += o.refused_busy;
    total.bad_checksums += o.bad_checksums;
    total.snapshots_checked += o.snapshots_checked;
    RemoteCounters& t = total.writer_host;
    t.data_frames_out += o.writer_host.data_frames_out;
    t.retransmitted_frames += o.writer_host.retransmitted_frames;
    t.tx_tail_frames += o.writer_host.tx_tail_frames;
    t.versions_shadowed += o.writer_host.versions_shadowed;
    t.pins_yielded += o.writer_host.pins_yielded;
    t.faults_injected += o.writer_host.faults_injected;
  }
  Print(std::to_string(seeds) + " seeds", total);
  std::printf("longest run: %llu ms of fake time (bound %llu)\n",
              static_cast<unsigned long long>(longest * kStepNs / 1'000'000),
              static_cast<unsigned long long>(kMaxTicks * kStepNs / 1'000'000));
  if (seeds >= 20 && !HasFailure()) {
    // The sweep reaches the timings the named runs reach one at a time.
    EXPECT_GT(total.refused_busy, 0u);
    EXPECT_GT(total.writer_host.retransmitted_frames, 0u);
    EXPECT_GT(total.writer_host.tx_tail_frames, 0u);
    EXPECT_GT(total.writer_host.versions_shadowed, 0u);
    EXPECT_GT(total.writer_host.pins_yielded, 0u);
  }
}

}  // namespace
}  // namespace dsm
