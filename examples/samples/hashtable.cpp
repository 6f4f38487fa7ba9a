// A hash table with chaining, built with plain pointers inside one area and
// looked up on other hosts. Areas map at the same address in every process on
// every host, so the pointers the builder stores (bucket heads, next links, key
// strings) are valid wherever the area is attached.
//
//   sample_hashtable build  --keys 20000 --readers 2     # the writer
//   sample_hashtable lookup --reader 0                   # each reader, any host
//
// The builder fills "<prefix>/table" (nodes and key strings allocated in random
// order, so chains jump all over the area), publishes it as one version and
// waits for every reader's report. A reader attaches the table, looks up every
// key ("key-<i>", value Expected(i)), walks every chain and checks every pointer
// stays inside the area, then publishes what it found in "<prefix>/ack/<reader>".
// The builder prints the reports, publishes version 2 (readers may leave) and
// exits 0 only if every reader found every key with its value.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "peer.h"

namespace {

constexpr const char* kWho = "sample_hashtable";
constexpr uint64_t kMagic = 0x68617368'7461626cULL;  // "hashtabl"

struct Node {
  const Node* next;
  const char* key;  // NUL-terminated, in the area
  uint64_t hash;
  uint64_t value;
};

struct Table {
  uint64_t magic;
  uint64_t keys;
  uint64_t bucket_count;
  const Node** buckets;
  uint64_t readers_done;  // set in version 2: every reader reported
};

// What a reader found, in its ack area.
struct Ack {
  uint64_t found;     // keys found with the right value
  uint64_t wrong;     // keys found with another value
  uint64_t missing;   // keys not found
  uint64_t walked;    // nodes reached by walking every chain
  uint64_t bad_pointers;
  uint64_t table_version;
  double lookup_us;   // time to look up every key
};

struct Options {
  std::string mode;
  uint64_t keys = 20000;
  int readers = 1;
  int reader = 0;
  std::string prefix = "ht";
  std::string json;
  double timeout_s = 30;
};

uint64_t Expected(uint64_t i) {  // splitmix64
  uint64_t z = i + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string Key(uint64_t i) { return "key-" + std::to_string(i); }

uint64_t Hash(const char* s) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 0x100000001b3ULL;
  return h;
}

size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

int Build(const Options& o) {
  const uint64_t buckets = std::max<uint64_t>(1, o.keys / 2);  // chains of 2 on average
  const size_t bytes = sizeof(Table) + buckets * sizeof(Node*) +
                       o.keys * (sizeof(Node) + AlignUp(Key(o.keys).size() + 1, alignof(Node)));
  const std::string name = o.prefix + "/table";
  void* area = nullptr;
  if (const int rc = dsm_alloc(name.c_str(), bytes, nullptr, &area); rc != DSM_OK) {
    return samples::Report(kWho, ("allocating " + name).c_str(), rc);
  }
  // A bump allocator over the area: everything below is plain stores to it.
  char* next_free = static_cast<char*>(area);
  auto take = [&](size_t n) {
    char* p = next_free;
    next_free += AlignUp(n, alignof(Node));
    return p;
  };
  auto* t = reinterpret_cast<Table*>(take(sizeof(Table)));
  auto** heads = reinterpret_cast<const Node**>(take(buckets * sizeof(Node*)));
  std::fill(heads, heads + buckets, nullptr);
  std::vector<uint64_t> order(o.keys);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  for (uint64_t i : order) {
    const std::string k = Key(i);
    auto* n = reinterpret_cast<Node*>(take(sizeof(Node)));
    char* s = take(k.size() + 1);
    std::memcpy(s, k.c_str(), k.size() + 1);
    n->key = s;
    n->hash = Hash(s);
    n->value = Expected(i);
    const Node** head = &heads[n->hash % buckets];
    n->next = *head;
    *head = n;
  }
  *t = Table{kMagic, o.keys, buckets, heads, 0};
  dsm_log(area, static_cast<size_t>(next_free - static_cast<char*>(area)));
  if (const int rc = samples::PublishRetrying(area, o.timeout_s); rc != DSM_OK) {
    return samples::Report(kWho, "publishing the table", rc);
  }
  std::printf("[hashtable build] %" PRIu64 " keys in %" PRIu64 " buckets, %.1f KiB of '%s' at %p, "
              "version %" PRIu64 "\n", o.keys, buckets,
              static_cast<double>(next_free - static_cast<char*>(area)) / 1024, name.c_str(), area,
              dsm_version(area));
  std::fflush(stdout);

  // Every reader's report.
  bool all_ok = true;
  nlohmann::json reports = nlohmann::json::array();
  for (int r = 0; r < o.readers; ++r) {
    const std::string ack_name = o.prefix + "/ack/" + std::to_string(r);
    const void* a = nullptr;
    const auto timeout_ms = static_cast<uint32_t>(o.timeout_s * 1000);
    int rc = dsm_attach(ack_name.c_str(), timeout_ms, &a, nullptr);
    if (rc == DSM_OK) rc = dsm_wait_version(a, 1, timeout_ms);
    if (rc != DSM_OK) {
      samples::Report(kWho, ("waiting for the report " + ack_name).c_str(), rc);
      all_ok = false;
      continue;
    }
    const Ack& ack = *static_cast<const Ack*>(a);
    const bool ok = ack.found == o.keys && ack.wrong == 0 && ack.missing == 0 &&
                    ack.walked == o.keys && ack.bad_pointers == 0;
    all_ok = all_ok && ok;
    std::printf("[hashtable build] reader %d: found %" PRIu64 "/%" PRIu64 ", wrong %" PRIu64
                ", missing %" PRIu64 ", walked %" PRIu64 " nodes, bad pointers %" PRIu64
                ", %.0f ns per lookup: %s\n", r, ack.found, o.keys, ack.wrong, ack.missing,
                ack.walked, ack.bad_pointers, ack.lookup_us * 1e3 / static_cast<double>(o.keys),
                ok ? "ok" : "FAILED");
    reports.push_back({{"reader", r}, {"found", ack.found}, {"wrong", ack.wrong},
                       {"missing", ack.missing}, {"walked", ack.walked},
                       {"bad_pointers", ack.bad_pointers}, {"lookup_us", ack.lookup_us}, {"ok", ok}});
    dsm_free(a);
  }
  if (!o.json.empty()) {
    std::ofstream(o.json) << nlohmann::json{{"sample", "hashtable"}, {"keys", o.keys},
                                            {"buckets", buckets}, {"readers", reports},
                                            {"ok", all_ok}}.dump(1)
                          << "\n";
  }
  // Version 2: readers may leave.
  t->readers_done = 1;
  dsm_log(&t->readers_done, sizeof(t->readers_done));
  samples::PublishRetrying(area, o.timeout_s);
  dsm_fini();
  return all_ok ? 0 : 1;
}

int Lookup(const Options& o) {
  const std::string name = o.prefix + "/table";
  const auto timeout_ms = static_cast<uint32_t>(o.timeout_s * 1000);
  const void* area = nullptr;
  size_t size = 0;
  int rc = dsm_attach(name.c_str(), timeout_ms, &area, &size);
  if (rc == DSM_OK) rc = dsm_wait_version(area, 1, timeout_ms);
  if (rc != DSM_OK) return samples::Report(kWho, ("reading " + name).c_str(), rc);
  const auto* t = static_cast<const Table*>(area);
  if (t->magic != kMagic) {
    std::fprintf(stderr, "%s: '%s' holds no table (magic %" PRIx64 ")\n", kWho, name.c_str(), t->magic);
    return 1;
  }
  // A pointer is followed only if the object it points to lies inside the area.
  const auto lo = reinterpret_cast<uintptr_t>(area), hi = lo + size;
  auto inside = [&](const void* p, size_t n) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return a >= lo && a <= hi && n <= hi - a;
  };
  Ack ack{};
  ack.table_version = dsm_version(area);
  const bool buckets_ok = inside(t->buckets, t->bucket_count * sizeof(Node*));
  if (buckets_ok) {
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < o.keys; ++i) {
      const std::string k = Key(i);
      const uint64_t h = Hash(k.c_str());
      const Node* n = t->buckets[h % t->bucket_count];
      // Bounded by the key count, so that a corrupt chain (a cycle) cannot hang the walk.
      for (uint64_t hops = 0; n && inside(n, sizeof(Node)) && hops <= t->keys; n = n->next, ++hops) {
        if (n->hash == h && inside(n->key, k.size() + 1) && std::strcmp(n->key, k.c_str()) == 0) break;
      }
      if (!n || !inside(n, sizeof(Node)) || n->hash != h) {
        ++ack.missing;
      } else if (n->value == Expected(i)) {
        ++ack.found;
      } else {
        ++ack.wrong;
      }
    }
    ack.lookup_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    for (uint64_t b = 0; b < t->bucket_count; ++b) {
      for (const Node* n = t->buckets[b]; n; n = n->next) {
        if (!inside(n, sizeof(Node)) || ack.walked > t->keys) {
          ++ack.bad_pointers;
          break;
        }
        ++ack.walked;
      }
    }
  } else {
    ack.bad_pointers = 1;
  }
  std::printf("[hashtable lookup %d] table version %" PRIu64 " at %p: found %" PRIu64 "/%" PRIu64
              ", wrong %" PRIu64 ", missing %" PRIu64 ", walked %" PRIu64 " nodes, bad pointers %"
              PRIu64 ", %.0f ns per lookup\n", o.reader, ack.table_version, area, ack.found, o.keys,
              ack.wrong, ack.missing, ack.walked, ack.bad_pointers,
              ack.lookup_us * 1e3 / static_cast<double>(o.keys));
  std::fflush(stdout);

  const std::string ack_name = o.prefix + "/ack/" + std::to_string(o.reader);
  void* a = nullptr;
  if ((rc = dsm_alloc(ack_name.c_str(), sizeof(Ack), nullptr, &a)) != DSM_OK) {
    return samples::Report(kWho, ("allocating " + ack_name).c_str(), rc);
  }
  *static_cast<Ack*>(a) = ack;
  dsm_log(a, sizeof(Ack));
  if ((rc = samples::PublishRetrying(a, o.timeout_s)) != DSM_OK) return samples::Report(kWho, "publishing the report", rc);
  // Stay until the builder has every report (its version 2), so ours is not lost.
  if ((rc = dsm_wait_version(area, 2, timeout_ms)) != DSM_OK) {
    samples::Report(kWho, "warning: waiting for the builder to take the report", rc);
  }
  dsm_fini();
  return ack.found == o.keys && ack.walked == o.keys && ack.bad_pointers == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"A chained hash table built with pointers inside one libdsm area, looked up on other hosts"};
  app.option_defaults()->always_capture_default();
  app.add_option("mode", o.mode, "build (the writer) or lookup (a reader)")
      ->required()
      ->check(CLI::IsMember({"build", "lookup"}));
  app.add_option("--keys", o.keys, "keys in the table")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 26));
  app.add_option("--readers", o.readers, "build: readers whose reports to wait for")->check(CLI::Range(0, 64));
  app.add_option("--reader", o.reader, "lookup: this reader's index")->check(CLI::Range(0, 63));
  app.add_option("--prefix", o.prefix, "areas are <prefix>/table and <prefix>/ack/<reader>");
  app.add_option("--json", o.json, "build: write the readers' reports here");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for the table or a report")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (const int rc = dsm_init(nullptr); rc != DSM_OK) return samples::Report(kWho, "connecting to dsmd", rc);
  return o.mode == "build" ? Build(o) : Lookup(o);
}
