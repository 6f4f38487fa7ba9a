// What becomes of replicas when their origin goes away, end to end in one
// process: three hosts as dsmd sets them up on a net::MemoryWire, one fake
// clock, a writer on host 1 (libdsm's WriterArea) and readers on host 2
// attaching by name as clients do.
//
// - Host 1's daemon dies and a new one starts (a new incarnation), whose new
//   writer allocates the same name (same index and generation as before, the
//   case that a stale frame could be taken for): host 2 retires the old
//   replica (never live again, its reader keeps its last version), and a new
//   reader of the name gets the new writer's bytes, from its first version.
// - A writer frees its area: the replica on host 2 is marked freed, its
//   reader keeps reading the last version, and the replica's memory comes
//   back when the reader lets go; job after job, host 2's region use returns
//   to where it started.
// - A writer dies and a new one allocates its name on the same host: host 2's
//   replica of the dead writer's area gives the name up to the new one.
// - A host lists its areas with its heartbeat until another host holds a
//   replica of one of them, and every 40 ms from then on.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dsm/dsm.h"
#include "libdsm/contract/control_protocol.h"
#include "libdsm/contract/publish_protocol.h"
#include "libdsm/writer_area.h"
#include "tests/daemon/in_process_host.h"

namespace dsm {
namespace {

constexpr uint64_t kAreaBytes = 64 << 10;
constexpr size_t kLines = kAreaBytes / kLineBytes;
constexpr uint64_t kStepNs = 100'000;  // the fake clock's tick
constexpr auto kMaxWallTime = std::chrono::seconds(20);
constexpr uint32_t kWriterClient = 100;

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What writer `tag` puts in every byte of `line` at `version`.
uint8_t LineByte(uint64_t tag, uint64_t version, size_t line) {
  return static_cast<uint8_t>(Mix(tag << 40 ^ version << 20 ^ line) | 1);
}

// Whether `bytes` is writer `tag`'s area at `version` (names the first wrong line).
::testing::AssertionResult HoldsVersion(const uint8_t* bytes, uint64_t tag, uint64_t version) {
  for (size_t line = 0; line < kLines; ++line) {
    const uint8_t want = LineByte(tag, version, line);
    for (size_t b = 0; b < kLineBytes; ++b) {
      if (bytes[line * kLineBytes + b] != want) {
        return ::testing::AssertionFailure()
               << "line " << line << " is not writer " << tag << "'s version " << version;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// A writer process on a host: its area mapped at the area's address.
class Writer {
 public:
  static std::unique_ptr<Writer> Alloc(InProcessHost& host, const std::string& name, uint64_t tag,
                                       uint64_t now_ns, uint64_t size = kAreaBytes) {
    Request req{};
    req.magic = kProtocolMagic;
    req.protocol_version = kProtocolVersion;
    req.type = RequestType::kAlloc;
    req.pid = getpid();
    std::snprintf(req.name, sizeof(req.name), "%s", name.c_str());
    req.size = size;
    const DirectoryResult r = host.directory().Alloc({kWriterClient, getpid()}, req, now_ns);
    EXPECT_EQ(r.status, 0) << r.message;
    if (r.status != 0) return nullptr;
    auto w = std::unique_ptr<Writer>(new Writer(host, tag));
    w->index_ = r.area_index;
    w->generation_ = r.area_generation;
    AreaControl& a = host.area(r.area_index);
    w->bytes_ = a.mapped_size;
    void* spot = mmap(reinterpret_cast<void*>(a.addr), a.mapped_size, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    EXPECT_EQ(spot, reinterpret_cast<void*>(a.addr)) << "the area's address is in use here";
    if (spot != reinterpret_cast<void*>(a.addr)) return nullptr;
    w->copy_ = static_cast<uint8_t*>(spot);
    w->area_ = WriterArea::Map(&a, r.area_index, host.backing().fd, DSM_TRACK_LOG,
                               DSM_PAGE_TRACKER_AUTO, host.backing().page_bytes);
    EXPECT_NE(w->area_, nullptr) << dsm_last_error();
    if (!w->area_) return nullptr;
    return w;
  }
  ~Writer() {
    area_.reset();
    if (copy_) munmap(copy_, bytes_);
  }

  // Writes every line for the next version and publishes it (refused busy: later).
  bool WriteAndPublish(uint64_t now_ns) {
    const uint64_t next = area_->version() + 1;
    for (size_t line = 0; line < kLines; ++line) {
      std::memset(copy_ + line * kLineBytes, LineByte(tag_, next, line), kLineBytes);
    }
    area_->ThreadLog().MarkLines(0, kLines);
    const int rc = area_->Publish(now_ns);
    EXPECT_TRUE(rc == DSM_OK || rc == DSM_ERR_BUSY) << dsm_last_error();
    return rc == DSM_OK;
  }
  // dsm_free, or the process dying (its client goes away).
  void Free() {
    Request req{};
    req.area_index = index_;
    req.area_generation = generation_;
    ASSERT_EQ(host_.directory().Free({kWriterClient, getpid()}, req).status, 0);
  }
  void Die() { host_.directory().ClientGone({kWriterClient, getpid()}); }

  uint64_t version() const { return area_->version(); }
  uint32_t index() const { return index_; }
  uint32_t generation() const { return generation_; }

 private:
  Writer(InProcessHost& host, uint64_t tag) : host_(host), tag_(tag) {}
  InProcessHost& host_;
  uint64_t tag_;
  uint32_t index_ = 0;
  uint32_t generation_ = 0;
  uint64_t bytes_ = 0;
  uint8_t* copy_ = nullptr;
  std::unique_ptr<WriterArea> area_;
};

// A reader process on a host: attaches `name` as the control server does for
// a client (asking remote sync for a replica while the name is not found).
struct Reader {
  Reader(InProcessHost* on, uint32_t client_id) : host(on), client(client_id) {}

  InProcessHost* host = nullptr;
  uint32_t client = 0;
  bool attached = false;
  uint32_t index = 0;
  uint32_t slot = 0;
  uint32_t pinned = kNoBuffer;
  uint64_t version = 0;
  int refused = 0;  // the last attach's status when it was not "not found yet"
  std::string refused_message;

  bool TryAttach(const std::string& name, uint64_t now_ns) {
    if (attached) return true;
    Request req{};
    std::snprintf(req.name, sizeof(req.name), "%s", name.c_str());
    const DirectoryResult res = host->directory().Attach({client, getpid()}, req);
    if (res.status == DSM_ERR_NOT_FOUND) {
      int status = 0;
      const std::string message = host->remote().RequestReplica(name, now_ns, &status);
      if (status != DSM_ERR_NOT_FOUND) {
        refused = status;
        refused_message = message;
      }
      return false;
    }
    EXPECT_EQ(res.status, 0) << res.message;
    attached = res.status == 0;
    index = res.area_index;
    slot = res.reader_slot;
    return attached;
  }
  // Moves to the newest version; returns its bytes (pinned until the next call).
  const uint8_t* Latest() {
    AreaControl& a = host->area(index);
    LatestVersion latest{};
    if (!PinLatest(a, slot, pinned, &latest)) return nullptr;
    SetPin(a, slot, latest.buffer);
    pinned = latest.buffer;
    version = latest.version;
    return host->Buffer(index, latest.buffer);
  }
  AreaState state() const { return static_cast<AreaState>(host->area(index).state.load()); }
  void Detach() {
    Request req{};
    req.area_index = index;
    req.area_generation = host->area(index).generation;
    EXPECT_EQ(host->directory().Free({client, getpid()}, req).status, 0);
    attached = false;
  }
};

class RemoteLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    wire_ = std::make_unique<net::MemoryWire>();
    hosts_.resize(3);
    for (uint16_t id : {1, 2, 3}) ASSERT_NO_FATAL_FAILURE(StartHost(id));
    deadline_ = std::chrono::steady_clock::now() + kMaxWallTime;
  }

  void StartHost(uint16_t id) {
    DaemonConfig config;
    config.host_id = id;
    config.region_bytes = id == 1 ? 32ull << 20 : 4ull << 20;
    std::string error;
    hosts_[id - 1] = InProcessHost::Start(config, MemoryCluster(3, true), wire_.get(), &error);
    ASSERT_NE(hosts_[id - 1], nullptr) << error;
  }
  // dsmd killed: its memory, its port and its state are gone.
  void StopHost(uint16_t id) { hosts_[id - 1].reset(); }

  InProcessHost& host(uint16_t id) { return *hosts_[id - 1]; }

  // Runs the cluster until `done` (checked every tick) or `max_ms` of fake
  // time; `each` runs every tick before the check.
  template <typename Each, typename Done>
  bool RunUntil(uint64_t max_ms, Each each, Done done) {
    const uint64_t end = now_ + max_ms * 1'000'000;
    while (now_ < end) {
      if (std::chrono::steady_clock::now() > deadline_) {
        ADD_FAILURE() << "out of wall time";
        return false;
      }
      now_ += kStepNs;
      for (auto& h : hosts_) {
        if (h) h->remote().Poll(now_);
      }
      each();
      if (done()) return true;
    }
    return false;
  }

  // Publishes versions every 2 ms until `reader` holds `writer`'s version `v`.
  bool ReplicateUpTo(Writer& writer, Reader& reader, const std::string& name, uint64_t v) {
    uint64_t next_write = now_;
    return RunUntil(
        3000,
        [&] {
          if (now_ >= next_write && writer.version() < v) {
            writer.WriteAndPublish(now_);
            next_write = now_ + 2'000'000;
          }
          if (reader.TryAttach(name, now_)) reader.Latest();
        },
        [&] { return reader.attached && reader.version == v; });
  }

  std::unique_ptr<net::MemoryWire> wire_;
  std::vector<std::unique_ptr<InProcessHost>> hosts_;
  uint64_t now_ = 1'000'000'000;
  std::chrono::steady_clock::time_point deadline_;
};

TEST_F(RemoteLifecycleTest, ARestartedHostsNewWriterIsReplicatedAndTheOldAreaNeverShownLive) {
  const std::string name = "life/restart";
  auto old_writer = Writer::Alloc(host(1), name, 1, now_);
  ASSERT_NE(old_writer, nullptr);
  const uint32_t old_index = old_writer->index();
  const uint32_t old_generation = old_writer->generation();
  Reader old_reader{&host(2), 200};
  ASSERT_TRUE(ReplicateUpTo(*old_writer, old_reader, name, 12)) << "at " << old_reader.version;
  ASSERT_TRUE(HoldsVersion(old_reader.Latest(), 1, 12));
  const uint32_t incarnation_before = host(2).segment().header.hosts[1].incarnation;
  ASSERT_NE(incarnation_before, 0u);

  // Host 1's dsmd is killed with its writer; host 2 sees its writer gone.
  old_writer.reset();
  StopHost(1);
  ASSERT_TRUE(RunUntil(2000, [] {}, [&] { return old_reader.state() == AreaState::kSealed; }))
      << "host 2 never noticed host 1 went silent";

  // A new dsmd on host 1 and a new writer of the name: a fresh directory
  // gives it the old area's index and generation.
  ASSERT_NO_FATAL_FAILURE(StartHost(1));
  auto new_writer = Writer::Alloc(host(1), name, 2, now_);
  ASSERT_NE(new_writer, nullptr);
  EXPECT_EQ(new_writer->index(), old_index);
  EXPECT_EQ(new_writer->generation(), old_generation);
  // Host 2 confirms the new incarnation with host 1 and gives the name up
  // (a client attaching before that still finds the old, writer-gone area).
  ASSERT_TRUE(RunUntil(1000, [] {}, [&] { return !host(2).directory().Named(old_reader.index); }))
      << "host 2 kept the dead incarnation's replica attachable";

  Reader new_reader{&host(2), 201};
  uint64_t next_write = now_;
  uint64_t ticks_old_live = 0;
  const bool replicated = RunUntil(
      3000,
      [&] {
        if (now_ >= next_write && new_writer->version() < 20) {
          new_writer->WriteAndPublish(now_);
          next_write = now_ + 2'000'000;
        }
        if (old_reader.state() == AreaState::kLive) ++ticks_old_live;
        if (new_reader.TryAttach(name, now_)) new_reader.Latest();
      },
      [&] { return new_reader.attached && new_reader.version == 20; });
  ASSERT_TRUE(replicated) << "new reader at version " << new_reader.version;
  EXPECT_EQ(ticks_old_live, 0u) << "the dead incarnation's replica was shown live";
  EXPECT_NE(host(2).segment().header.hosts[1].incarnation, incarnation_before);
  EXPECT_NE(new_reader.index, old_reader.index) << "the new area is a new replica";
  EXPECT_TRUE(HoldsVersion(new_reader.Latest(), 2, 20));

  // The old replica: writer gone, its last version intact, not attachable.
  EXPECT_EQ(old_reader.state(), AreaState::kSealed);
  EXPECT_TRUE(HoldsVersion(old_reader.Latest(), 1, 12));
  EXPECT_EQ(old_reader.version, 12u);
  // Once its reader lets go, its memory goes back.
  old_reader.Detach();
  EXPECT_EQ(host(2).area(old_reader.index).state.load(), static_cast<uint32_t>(AreaState::kFree));
}

TEST_F(RemoteLifecycleTest, FreedAreasAreFreedOnReaderHostsJobAfterJob) {
  constexpr int kJobs = 20;
  const uint64_t free_at_start = host(2).directory().backing_free_bytes();
  for (int job = 0; job < kJobs; ++job) {
    SCOPED_TRACE("job " + std::to_string(job));
    const std::string name = "life/job" + std::to_string(job);
    auto writer = Writer::Alloc(host(1), name, 10 + job, now_);
    ASSERT_NE(writer, nullptr);
    Reader reader{&host(2), 300};
    ASSERT_TRUE(ReplicateUpTo(*writer, reader, name, 5));
    EXPECT_LT(host(2).directory().backing_free_bytes(), free_at_start);
    ASSERT_NO_FATAL_FAILURE(writer->Free());
    ASSERT_TRUE(RunUntil(1000, [] {}, [&] { return reader.state() == AreaState::kFreed; }))
        << "host 2 never learnt the area was freed";
    // The reader keeps its last version until it lets go.
    EXPECT_TRUE(HoldsVersion(reader.Latest(), 10 + job, 5));
    Reader late{&host(2), 301};
    EXPECT_FALSE(late.TryAttach(name, now_)) << "a freed area is not attachable";
    reader.Detach();
    EXPECT_EQ(host(2).directory().backing_free_bytes(), free_at_start);
    EXPECT_EQ(host(2).area(reader.index).state.load(), static_cast<uint32_t>(AreaState::kFree));
    writer.reset();
  }
}

// An idle host sends a heartbeat and a listing every 100 ms, in one wake;
// once another host holds a replica of one of its areas, the listing goes
// every 40 ms, for that replica's staleness.
TEST_F(RemoteLifecycleTest, AHostListsWithItsHeartbeatUntilAnotherHoldsAReplica) {
  const auto frames_sent = [&] { return host(1).segment().header.remote.tx_frames; };
  const auto run_ms = [&](uint64_t ms) { RunUntil(ms, [] {}, [] { return false; }); };
  run_ms(500);  // every host up
  uint64_t before = frames_sent();
  run_ms(1000);
  const uint64_t idle = frames_sent() - before;
  EXPECT_GE(idle, 18u);
  EXPECT_LE(idle, 22u) << "multicast: a heartbeat and a listing every 100 ms";

  auto writer = Writer::Alloc(host(1), "life/listed", 7, now_);
  ASSERT_NE(writer, nullptr);
  Reader reader{&host(2), 300};
  ASSERT_TRUE(ReplicateUpTo(*writer, reader, "life/listed", 2));
  run_ms(500);  // the last version acknowledged
  before = frames_sent();
  run_ms(1000);
  const uint64_t exported = frames_sent() - before;
  EXPECT_GE(exported, 33u) << "heartbeats every 100 ms and listings every 40 ms";
  EXPECT_LE(exported, 40u);
}

TEST_F(RemoteLifecycleTest, AnAttachOntoAFullRegionFailsAtOnceAndSaysWhatToRaise) {
  // 2 MiB with its reader buffers does not fit host 2's 4 MiB region.
  auto writer = Writer::Alloc(host(1), "life/big", 5, now_, 2 << 20);
  ASSERT_NE(writer, nullptr);
  writer->WriteAndPublish(now_);
  Reader reader{&host(2), 500};
  const uint64_t start = now_;
  ASSERT_TRUE(RunUntil(1000, [&] { reader.TryAttach("life/big", now_); },
                       [&] { return reader.refused != 0 || reader.attached; }));
  EXPECT_FALSE(reader.attached);
  EXPECT_EQ(reader.refused, DSM_ERR_NO_SPACE);
  EXPECT_LT(now_ - start, 1'000'000'000u) << "refused only after a second";
  EXPECT_NE(reader.refused_message.find("--region-size"), std::string::npos)
      << reader.refused_message;
  EXPECT_NE(reader.refused_message.find("life/big"), std::string::npos) << reader.refused_message;
}

TEST_F(RemoteLifecycleTest, ANewWriterOfADeadWritersNameReplacesItsReplica) {
  const std::string name = "life/rewrite";
  auto first = Writer::Alloc(host(1), name, 7, now_);
  ASSERT_NE(first, nullptr);
  Reader reader{&host(2), 400};
  ASSERT_TRUE(ReplicateUpTo(*first, reader, name, 4));
  first->Die();
  ASSERT_TRUE(RunUntil(1000, [] {}, [&] { return reader.state() == AreaState::kSealed; }))
      << "host 2 never learnt the writer died";
  first.reset();

  auto second = Writer::Alloc(host(1), name, 8, now_);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(RunUntil(1000, [] {}, [&] { return !host(2).directory().Named(reader.index); }))
      << "host 2 kept the dead writer's replica attachable";
  Reader next{&host(2), 401};
  ASSERT_TRUE(ReplicateUpTo(*second, next, name, 6)) << "at " << next.version;
  EXPECT_NE(next.index, reader.index);
  EXPECT_TRUE(HoldsVersion(next.Latest(), 8, 6));
  EXPECT_EQ(reader.state(), AreaState::kSealed) << "the dead writer's replica stays writer-gone";
  EXPECT_TRUE(HoldsVersion(reader.Latest(), 7, 4));
  reader.Detach();
  // Unnamed at host 1's first listing of the new area, retired once two whole
  // listings leave the old one out: its memory comes back then.
  EXPECT_TRUE(RunUntil(1000, [] {}, [&] {
    return host(2).area(reader.index).state.load() == static_cast<uint32_t>(AreaState::kFree);
  })) << "the dead writer's replica was never retired";
}

}  // namespace
}  // namespace dsm
