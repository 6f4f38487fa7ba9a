#include "tests/multihost/replication_workload.h"

#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "dsm/dsm.h"
#include "tests/support/child_process.h"

namespace dsm::testing {

namespace {

constexpr size_t kLine = 64;
constexpr int kListNodes = 200;
constexpr size_t kListBytes = 64 * 1024;

struct Node {
  Node* next;
  uint64_t value;
};

}  // namespace

bool Init(const std::string& socket) {
  dsm_init_opts opts{};
  opts.socket_path = socket.c_str();
  return dsm_init(&opts) == DSM_OK;
}

int AttachAndCheck(const std::string& socket, uint64_t want, size_t area_bytes, uint64_t* seen) {
  if (!Init(socket)) return 30;
  const void* p = nullptr;
  if (dsm_attach("mh/area", 20000, &p, nullptr) != DSM_OK) return 31;
  if (dsm_wait_version(p, want, 20000) != DSM_OK) return 32;
  const auto* bytes = static_cast<const uint8_t*>(p);
  Stamp s;
  std::memcpy(&s, bytes, sizeof(s));
  *seen = dsm_version(p);
  if (s.version != *seen || s.hash != XXH3_64bits(bytes + 64, area_bytes - 64)) return 33;
  return dsm_fini() == DSM_OK ? 0 : 34;
}

int RunWriter(const std::string& socket, const WorkloadOptions& o, WorkloadBoard* b) {
  if (!Init(socket)) return 10;
  void* p = nullptr;
  void* l = nullptr;
  if (dsm_alloc("mh/area", o.area_bytes, nullptr, &p) != DSM_OK) return 11;
  if (dsm_alloc("mh/list", kListBytes, nullptr, &l) != DSM_OK) return 12;
  // A linked list whose nodes are scattered through the area, linked by address.
  auto* nodes = static_cast<Node*>(l);
  const int slots = static_cast<int>(kListBytes / sizeof(Node));
  std::mt19937_64 rng(o.seed);
  std::vector<int> order(slots);
  for (int i = 0; i < slots; ++i) order[i] = i;
  std::shuffle(order.begin() + 1, order.end(), rng);
  for (int i = 0; i < kListNodes; ++i) {
    Node& n = nodes[order[i]];
    n.value = static_cast<uint64_t>(i) * 7 + 1;
    n.next = i + 1 < kListNodes ? &nodes[order[i + 1]] : nullptr;
    b->list_sum += n.value;
  }
  dsm_log(l, kListBytes);
  while (dsm_publish(l) == DSM_ERR_BUSY) std::this_thread::yield();
  b->allocated = true;
  WaitFor([&] { return b->readers_attached.load() >= o.readers; }, 60000);

  auto* bytes = static_cast<uint8_t*>(p);
  const size_t lines = o.area_bytes / kLine;
  const size_t per_version = std::max<size_t>(1, static_cast<size_t>(o.dirty_fraction * lines));
  std::uniform_int_distribution<size_t> pick(1, lines - 1);
  for (uint64_t v = 1; v <= o.versions && !b->writer_stop; ++v) {
    for (size_t i = 0; i < per_version; ++i) {
      const size_t line = pick(rng);
      uint64_t* w = reinterpret_cast<uint64_t*>(bytes + line * kLine);
      for (int k = 0; k < 8; ++k) w[k] = v * 1000003 + line;
      dsm_log(w, kLine);
    }
    const Stamp s{v, XXH3_64bits(bytes + kLine, o.area_bytes - kLine)};
    std::memcpy(bytes, &s, sizeof(s));
    dsm_log(bytes, sizeof(s));
    int rc;
    for (int tries = 0; (rc = dsm_publish(p)) == DSM_ERR_BUSY && tries < 100000; ++tries) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (rc != DSM_OK || dsm_version(p) != v) return 13;
    b->writer_version = v;
    std::this_thread::sleep_for(std::chrono::microseconds(o.pause_us));
  }
  b->writer_hash = XXH3_64bits(p, o.area_bytes);
  b->writer_done = true;
  // Stay (and keep confirming our state) until the readers are done.
  for (int i = 0; i < 120000 && !b->writer_may_exit && (b->readers_done < o.readers || b->writer_hold);
       ++i) {
    dsm_service();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return dsm_fini() == DSM_OK ? 0 : 14;
}

int RunReader(const std::string& socket, int id, const WorkloadOptions& o, WorkloadBoard* b) {
  ReaderReport& r = b->readers[id];
  if (!Init(socket)) return 20;
  const void* p = nullptr;
  const void* l = nullptr;
  size_t size = 0;
  r.attach_rc = dsm_attach("mh/area", 20000, &p, &size);
  if (r.attach_rc != DSM_OK || size != o.area_bytes) return 21;
  if (dsm_attach("mh/list", 20000, &l, nullptr) != DSM_OK) return 22;
  if (dsm_wait_version(l, 1, 20000) != DSM_OK) return 23;
  for (const Node* n = static_cast<const Node*>(l); n; n = n->next) r.list_sum += n->value;
  ++b->readers_attached;
  const auto* bytes = static_cast<const uint8_t*>(p);
  uint64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.reader_timeout_s);
  while (std::chrono::steady_clock::now() < deadline && !b->readers_stop) {
    dsm_service();
    const uint64_t v = dsm_version(p);
    if (v < last) ++r.backwards;
    if (v != last) ++r.distinct_versions;
    last = v;
    ++r.snapshots;
    if (v > 0) {
      Stamp s;
      std::memcpy(&s, bytes, sizeof(s));
      if (s.version != v || s.hash != XXH3_64bits(bytes + kLine, o.area_bytes - kLine)) ++r.torn;
    }
    if (b->writer_done && v >= b->writer_version.load()) break;
    if (id < o.waiting_readers) {
      dsm_wait_version(p, last + 1, 50);  // (a timeout just looks again)
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  }
  r.final_version = dsm_version(p);
  r.final_hash = XXH3_64bits(p, o.area_bytes);
  ++b->readers_done;
  return dsm_fini() == DSM_OK ? 0 : 24;
}

}  // namespace dsm::testing
