// dsmctl against known state, in table and --json form: areas (name, owner,
// size, version, readers, XXH3 of the replica's content) after a known workload
// on a single private daemon and on a 3-host virtual cluster; hosts up, then one
// down; counters after injected bad frames (raw_frame_tool, as in
// tests/multihost/bad_frames_test.cpp) and the sync epochs of the workload.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dsm/dsm.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/dsmd_process.h"

namespace dsm::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kAreaBytes = 64 * 1024;  // a multiple of the backing page: no rounding
constexpr uint64_t kVersions = 10;
constexpr int kChildDeadlineS = 120;  // children give up after this, whatever happens
constexpr uint32_t kBadFrames = 25;
constexpr int kWaitMs = 15000;        // for a state dsmctl should show
constexpr uint64_t kFutureVersion = uint64_t{1} << 40;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Exit status and stdout of a command.
int Capture(const std::string& command, std::string* out) {
  out->clear();
  FILE* f = popen(command.c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out->append(buf, n);
  const int rc = pclose(f);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string Dsmctl(const std::string& socket, const std::string& args) {
  std::string out;
  Capture(Env("DSM_DSMCTL") + " --socket " + socket + " " + args + " 2>&1", &out);
  return out;
}

json DsmctlJson(const std::string& socket) {
  return json::parse(Dsmctl(socket, "--json all"), nullptr, false);
}

// The table line that starts with `first` (first column), "" if none.
std::string Row(const std::string& table, const std::string& first) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string w;
    words >> w;
    if (w == first) return line;
  }
  return "";
}

// The content of version v of an area of `bytes` bytes: every byte written.
void Fill(uint8_t* p, size_t bytes, uint64_t salt, uint64_t v) {
  for (size_t i = 0; i < bytes / 8; ++i) {
    const uint64_t x = (salt * 1000003 + v) * 0x9E3779B97F4A7C15ULL + i;
    std::memcpy(p + i * 8, &x, 8);
  }
}

std::string Hex(uint64_t h) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

std::string ExpectedHash(size_t bytes, uint64_t salt, uint64_t v) {
  std::vector<uint8_t> buf(bytes);
  Fill(buf.data(), bytes, salt, v);
  return Hex(XXH3_64bits(buf.data(), bytes));
}

// The number after `key` in a "key value" table (0 if absent).
uint64_t Value(const std::string& table, const std::string& key) {
  std::istringstream row(Row(table, key));
  std::string k;
  uint64_t v = 0;
  row >> k >> v;
  return v;
}

bool AllHostsUp(const json& j) {
  for (const json& h : j["hosts"]) {
    if (!h["up"].get<bool>()) return false;
  }
  return true;
}

const json* FindArea(const json& j, const std::string& name, bool replica) {
  if (!j.is_object() || !j["areas"].is_array()) return nullptr;
  for (const json& a : j["areas"]) {
    if (a["name"] == name && a["replica"].get<bool>() == replica) return &a;
  }
  return nullptr;
}

bool Init(const std::string& socket) {
  dsm_init_opts opts{};
  opts.socket_path = socket.c_str();
  return dsm_init(&opts) == DSM_OK;
}

// Allocates `name` and publishes versions 1..kVersions of Fill(salt).
bool Publish(const std::string& name, size_t bytes, uint64_t salt, void** area) {
  if (dsm_alloc(name.c_str(), bytes, nullptr, area) != DSM_OK) return false;
  auto* p = static_cast<uint8_t*>(*area);
  for (uint64_t v = 1; v <= kVersions; ++v) {
    Fill(p, bytes, salt, v);
    dsm_log(p, bytes);
    int rc;
    for (int tries = 0; (rc = dsm_publish(p)) == DSM_ERR_BUSY && tries < 10000; ++tries) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (rc != DSM_OK || dsm_version(p) != v) return false;
  }
  return true;
}

struct Board {
  std::atomic<bool> go{false};
  std::atomic<bool> ready{false};
  std::atomic<bool> attached{false};
  std::atomic<bool> exit{false};
};

// Stays a client (serving its quiescent points) until told to exit.
int Linger(Board* b) {
  const auto deadline = Clock::now() + std::chrono::seconds(kChildDeadlineS);
  while (!b->exit && Clock::now() < deadline) {
    dsm_service();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return dsm_fini() == DSM_OK ? 0 : 9;
}

// Attaches `name` and follows it to kVersions, then lingers.
int RunReader(const std::string& socket, const std::string& name, Board* b) {
  const auto deadline = Clock::now() + std::chrono::seconds(kChildDeadlineS);
  while (!b->go && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!Init(socket)) return 20;
  const void* p = nullptr;
  size_t size = 0;
  if (dsm_attach(name.c_str(), 30000, &p, &size) != DSM_OK || size != kAreaBytes) return 21;
  if (dsm_wait_version(p, kVersions, 30000) != DSM_OK) return 22;
  b->attached = true;
  return Linger(b);
}

struct Children {
  Board* b;
  std::vector<pid_t> pids;
  ~Children() {
    b->exit = true;
    for (pid_t p : pids) Reap(p, 30000);
  }
};

TEST(Dsmctl, PrivateDaemonShowsKnownAreasInTableAndJson) {
  Shared<Board> b;
  Children children{&*b, {}};
  DsmdProcess d;
  ASSERT_TRUE(d.ok()) << "private dsmd did not start";
  // The reader is forked before this process connects, and waits for the area.
  children.pids.push_back(Spawn([&] { return RunReader(d.socket_path(), "tools/a", &*b); }));
  ASSERT_TRUE(Init(d.socket_path()));
  void* a = nullptr;
  void* big = nullptr;
  ASSERT_TRUE(Publish("tools/a", kAreaBytes, 1, &a));
  ASSERT_TRUE(Publish("tools/big", 4 * kAreaBytes, 2, &big));
  b->go = true;
  ASSERT_TRUE(WaitFor([&] { return b->attached.load(); }, kWaitMs)) << "reader did not attach";

  const json j = DsmctlJson(d.socket_path());
  ASSERT_TRUE(j.is_object()) << Dsmctl(d.socket_path(), "--json all");
  EXPECT_TRUE(j["daemon_alive"].get<bool>());
  ASSERT_EQ(j["hosts"].size(), 1u);
  EXPECT_TRUE(j["hosts"][0]["up"].get<bool>());
  EXPECT_TRUE(j["hosts"][0]["self"].get<bool>());
  struct Want {
    const char* name;
    size_t bytes;
    uint64_t salt;
    int readers;
  };
  const std::string table = Dsmctl(d.socket_path(), "areas");
  std::printf("%s", table.c_str());
  for (const Want& w : {Want{"tools/a", kAreaBytes, 1, 1}, Want{"tools/big", 4 * kAreaBytes, 2, 0}}) {
    SCOPED_TRACE(w.name);
    const json* area = FindArea(j, w.name, false);
    ASSERT_NE(area, nullptr) << j.dump();
    const std::string hash = ExpectedHash(w.bytes, w.salt, kVersions);
    EXPECT_EQ((*area)["state"], "live");
    EXPECT_EQ((*area)["owner_host"], j["host"]);
    EXPECT_EQ((*area)["size"].get<size_t>(), w.bytes);
    EXPECT_EQ((*area)["version"].get<uint64_t>(), kVersions);
    EXPECT_EQ((*area)["readers"].get<int>(), w.readers);
    EXPECT_EQ((*area)["publishes"].get<uint64_t>(), kVersions);
    EXPECT_EQ((*area)["content"]["version"].get<uint64_t>(), kVersions);
    EXPECT_EQ((*area)["content"]["xxh3"], hash);
    // The table: same name, size, version and hash on the area's row.
    const std::string row = Row(table, w.name);
    ASSERT_FALSE(row.empty()) << table;
    std::istringstream cols(row);
    std::string name, state, host, replica;
    size_t size = 0;
    uint64_t version = 0;
    double stale = 0;
    int readers = -1;
    std::string tracking, waiting, xxh3;
    cols >> name >> state >> host >> replica >> size >> version >> stale >> readers >> tracking >>
        waiting >> xxh3;
    EXPECT_EQ(waiting, "-") << "not a managed area";
    EXPECT_EQ(state, "live");
    EXPECT_EQ(tracking, "log");  // explicit logging: no page tracker
    EXPECT_EQ(replica, "no");
    EXPECT_EQ(size, w.bytes);
    EXPECT_EQ(version, kVersions);
    EXPECT_EQ(readers, w.readers);
    EXPECT_EQ(xxh3, hash);
  }
  // Sync epochs: every publish of this process, in the JSON and the counters table.
  EXPECT_EQ(j["sync"]["local_publishes"].get<uint64_t>(), 2 * kVersions);
  EXPECT_EQ(j["sync"]["replica_versions_applied"].get<uint64_t>(), 0u);
  EXPECT_GT(j["sync"]["publish_pause_ms_total"].get<double>(), 0);
  const std::string counters = Dsmctl(d.socket_path(), "counters");
  EXPECT_EQ(Value(counters, "sync.local_publishes"), 2 * kVersions) << counters;
  EXPECT_EQ(dsm_fini(), DSM_OK);
}

TEST(Dsmctl, NoDaemonIsAClearError) {
  std::string out;
  const int rc = Capture(Env("DSM_DSMCTL") + " --socket /nonexistent/dsmd.sock hosts 2>&1", &out);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("no dsmd at /nonexistent/dsmd.sock"), std::string::npos) << out;
}

// raw_frame_tool: $DSM_RAW_FRAME_TOOL (meson sets it).
TEST(Dsmctl, ClusterAreasHostsAndCountersAfterBadFrames) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string tool = Env("DSM_RAW_FRAME_TOOL");
  ASSERT_EQ(access(tool.c_str(), X_OK), 0) << "raw_frame_tool not found at '" << tool << "'";
  VirtualCluster cluster(3);
  ASSERT_TRUE(cluster.ok());

  Shared<Board> b;
  Children children{&*b, {}};
  children.pids.push_back(Spawn([&] {
    if (!Init(cluster.socket(1))) return 10;
    void* p = nullptr;
    if (!Publish("tools/w", kAreaBytes, 3, &p)) return 11;
    b->ready = true;
    return Linger(&*b);
  }));
  ASSERT_TRUE(WaitFor([&] { return b->ready.load(); }, kWaitMs)) << "writer on host 1 failed";
  children.pids.push_back(Spawn([&] { return RunReader(cluster.socket(2), "tools/w", &*b); }));
  b->go = true;
  ASSERT_TRUE(WaitFor([&] { return b->attached.load(); }, 2 * kWaitMs)) << "reader on host 2 failed";

  // Areas: the origin on host 1 and the replica on host 2 at the same version and hash.
  // (Also waited for: host 3's first heartbeat.)
  const std::string hash = ExpectedHash(kAreaBytes, 3, kVersions);
  json h1, h2;
  const json* origin = nullptr;
  const json* replica = nullptr;
  WaitFor([&] {
    h1 = DsmctlJson(cluster.socket(1));
    h2 = DsmctlJson(cluster.socket(2));
    origin = FindArea(h1, "tools/w", false);
    replica = FindArea(h2, "tools/w", true);
    return origin && replica && !(*replica)["content"].is_null() &&
           (*replica)["content"]["version"].get<uint64_t>() == kVersions &&
           (*replica)["readers"].get<int>() == 1 && AllHostsUp(h2) &&
           h1["counters"]["tx_bytes"].get<uint64_t>() > kAreaBytes;
  }, kWaitMs);
  ASSERT_NE(origin, nullptr) << h1.dump();
  ASSERT_NE(replica, nullptr) << h2.dump();
  for (const json* a : {origin, replica}) {
    EXPECT_EQ((*a)["owner_host"].get<int>(), 1);
    EXPECT_EQ((*a)["size"].get<size_t>(), kAreaBytes);
    EXPECT_EQ((*a)["version"].get<uint64_t>(), kVersions);
    EXPECT_EQ((*a)["content"]["xxh3"], hash);
  }
  EXPECT_EQ((*replica)["readers"].get<int>(), 1);
  EXPECT_TRUE((*origin)["exported"].get<bool>());
  EXPECT_EQ(FindArea(DsmctlJson(cluster.socket(3)), "tools/w", true), nullptr)
      << "host 3 attached nothing";
  const std::string table2 = Dsmctl(cluster.socket(2), "areas");
  std::printf("host 2:\n%s", table2.c_str());
  const std::string row = Row(table2, "tools/w");
  EXPECT_NE(row.find(" yes "), std::string::npos) << row;
  EXPECT_NE(row.find(hash + " (" + std::to_string(kVersions) + ")"), std::string::npos) << row;
  EXPECT_GE(h1["sync"]["local_publishes"].get<uint64_t>(), kVersions);
  EXPECT_GE(h2["sync"]["replica_versions_applied"].get<uint64_t>(), 1u);
  EXPECT_GT(h1["counters"]["data_frames_out"].get<uint64_t>(), 0u);
  EXPECT_GT(h1["counters"]["tx_bytes"].get<uint64_t>(), kAreaBytes);
  // Bytes in on the reader's host: at least the area's content came in.
  EXPECT_GT(h2["counters"]["rx_bytes"].get<uint64_t>(), kAreaBytes);
  EXPECT_GE(h1["counters"]["tx_bytes"].get<uint64_t>(),
            h1["counters"]["data_bytes_out"].get<uint64_t>());

  // Hosts: all three up on host 2, heard from recently (heartbeats every 100 ms).
  ASSERT_EQ(h2["hosts"].size(), 3u);
  for (const json& h : h2["hosts"]) {
    EXPECT_TRUE(h["up"].get<bool>()) << h.dump();
    EXPECT_EQ(h["self"].get<bool>(), h["id"].get<int>() == 2);
    if (h["id"].get<int>() != 2) {
      EXPECT_LT(h["last_heard_ms_ago"].get<double>(), 1000) << h.dump();
    }
  }

  // Counters: bad-checksum frames from host 1 to host 2 are counted as such.
  const std::string area = " --area-index " + std::to_string((*origin)["index"].get<int>()) +
                           " --area-generation 1 --full --version " + std::to_string(kFutureVersion);
  const uint64_t before = h2["counters"]["dropped"]["bad_checksum"].get<uint64_t>();
  ASSERT_EQ(cluster.Exec(1, tool + " --from 1 --to 2 --count " + std::to_string(kBadFrames) +
                                " --case bad_checksum" + area + " >/dev/null"), 0);
  json after;
  ASSERT_TRUE(WaitFor([&] {
    after = DsmctlJson(cluster.socket(2));
    return after.is_object() &&
           after["counters"]["dropped"]["bad_checksum"].get<uint64_t>() >= before + kBadFrames;
  }, kWaitMs)) << after["counters"].dump();
  const uint64_t dropped = after["counters"]["dropped"]["bad_checksum"].get<uint64_t>();
  EXPECT_EQ(dropped, before + kBadFrames);
  const std::string counters = Dsmctl(cluster.socket(2), "counters");
  std::printf("host 2 counters:\n%s", counters.c_str());
  EXPECT_EQ(Value(counters, "dropped.bad_checksum"), dropped) << counters;
  EXPECT_GE(after["counters"]["frames_in"].get<uint64_t>(), kBadFrames);

  // Hosts: host 3's daemon stops; host 2 reports it down (after 500 ms of silence).
  const int pid3 = cluster.DaemonPid(3);
  ASSERT_GT(pid3, 0);
  ASSERT_EQ(kill(pid3, SIGKILL), 0);
  json down;
  EXPECT_TRUE(WaitFor([&] {
    down = DsmctlJson(cluster.socket(2));
    if (!down.is_object()) return false;
    for (const json& h : down["hosts"]) {
      if (h["id"].get<int>() == 3) return !h["up"].get<bool>();
    }
    return false;
  }, kWaitMs)) << down["hosts"].dump();
  const std::string hosts = Dsmctl(cluster.socket(2), "hosts");
  std::printf("host 2 after host 3 stopped:\n%s", hosts.c_str());
  EXPECT_NE(Row(hosts, "3").find("DOWN"), std::string::npos) << hosts;
  EXPECT_NE(Row(hosts, "1").find("up"), std::string::npos) << hosts;
}

}  // namespace
}  // namespace dsm::testing
