// tcp-fanout: what a user would write instead of libdsm, the reference that
// dsm-bench's report divides by. The writer keeps the area in its own memory
// and, each round, sends every changed 64-byte line with its index to every
// reader over one TCP connection each; a reader applies the lines to its copy
// and acknowledges the version. Same workload as dsm-bench: an area of S
// bytes, version 1 the whole area, then rounds that change a fraction f of
// the lines (uniform random, seeded; line 0 always), closed loop with a
// window (a round starts when every reader acknowledged the version `window`
// rounds back).
//
//   tcp-fanout reader --port P --size S
//   tcp-fanout writer --peer IP [--peer IP...] --port P --size S --fraction F
//                     [--seconds T] [--window W] [--iface dsm0] [--json OUT]
//
// Reported (stdout and --json): rounds/s, changed bytes/s, publish-to-visible
// p50/p99 (per version, the last reader; a reader stamps CLOCK_MONOTONIC,
// one clock for every namespace of the machine, when the version is applied),
// Ethernet bytes the writer's interface sent per changed byte (and per copy),
// CPU time per round of the writer and of each reader, and whether every
// reader's copy ended equal to the writer's (XXH3).
//
// `reader --snapshots` keeps versions atomic for the reader's users, as
// libdsm does (TcpSnapshotView: two buffers, a view remapped per version):
// the same guarantee built on TCP, the reference for what that guarantee
// costs on the machine.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/tcp_snapshot_view.h"

namespace {

using nlohmann::json;

constexpr size_t kLine = 64;
constexpr uint32_t kFlagEnd = 1;

struct __attribute__((packed)) RoundHeader {
  uint64_t version;
  uint32_t lines;  // records of (uint32 index, 64 bytes) follow
  uint32_t flags;  // kFlagEnd: no lines; the reader answers with a Final and exits
};
struct __attribute__((packed)) Record {
  uint32_t index;
  uint8_t bytes[kLine];
};
struct __attribute__((packed)) Ack {
  uint64_t version;
  uint64_t visible_ns;
};
struct __attribute__((packed)) Final {
  uint64_t hash;
  uint64_t cpu_ns;  // the reader's user + system time while it ran
  uint64_t versions;
  uint64_t snapshot_page_bytes;  // 0: the reader applies in place (no snapshots)
};

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t CpuNs() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  const auto ns = [](const timeval& t) {
    return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_usec) * 1000u;
  };
  return ns(u.ru_utime) + ns(u.ru_stime);
}

bool WriteAll(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t bytes) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

void NoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int RunReader(uint16_t port, size_t size, bool snapshots) {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(ls, 1) != 0) {
    std::fprintf(stderr, "tcp-fanout reader: cannot listen on port %u: %s\n", port, std::strerror(errno));
    return 1;
  }
  pollfd p{ls, POLLIN, 0};
  if (poll(&p, 1, 60000) != 1) {
    std::fprintf(stderr, "tcp-fanout reader: no writer within 60 s\n");
    return 1;
  }
  const int fd = accept(ls, nullptr, nullptr);
  close(ls);
  if (fd < 0) return 1;
  NoDelay(fd);
  const uint64_t cpu_start = CpuNs();
  std::vector<uint8_t> area(snapshots ? 0 : size);
  dsm::bench::TcpSnapshotView view;
  std::string error;
  if (snapshots && !view.Open(size, &error)) {
    std::fprintf(stderr, "tcp-fanout reader: %s\n", error.c_str());
    return 1;
  }
  std::vector<Record> records;
  std::vector<uint32_t> lines;
  uint64_t versions = 0;
  for (;;) {
    RoundHeader h;
    if (!ReadAll(fd, &h, sizeof(h))) {
      std::fprintf(stderr, "tcp-fanout reader: the writer went away\n");
      return 1;
    }
    if (h.flags & kFlagEnd) break;
    records.resize(h.lines);
    if (!ReadAll(fd, records.data(), records.size() * sizeof(Record))) return 1;
    if (snapshots) {
      lines.resize(records.size());
      for (size_t i = 0; i < records.size(); ++i) lines[i] = records[i].index;
      if (!view.Apply(lines, records.empty() ? nullptr : records[0].bytes, sizeof(Record),
                      &error)) {
        std::fprintf(stderr, "tcp-fanout reader: %s\n", error.c_str());
        return 1;
      }
    } else {
      for (const Record& r : records) {
        if (size_t{r.index} * kLine + kLine > size) return 1;
        std::memcpy(area.data() + size_t{r.index} * kLine, r.bytes, kLine);
      }
    }
    ++versions;
    const Ack ack{h.version, NowNs()};
    if (!WriteAll(fd, &ack, sizeof(ack))) return 1;
    if (snapshots) view.CatchUpSpare();  // while the next version is on its way
  }
  const uint64_t page_bytes = !snapshots ? 0 : view.huge_pages() ? uint64_t{2} << 20 : 4096;
  const Final f{XXH3_64bits(snapshots ? view.view() : area.data(), size), CpuNs() - cpu_start,
                versions, page_bytes};
  WriteAll(fd, &f, sizeof(f));
  close(fd);
  return 0;
}

uint64_t TxBytes(const std::string& iface) {
  std::ifstream in("/sys/class/net/" + iface + "/statistics/tx_bytes");
  uint64_t v = 0;
  in >> v;
  return v;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

struct WriterOptions {
  std::vector<std::string> peers;
  uint16_t port = 7500;
  size_t size = size_t{64} << 20;
  double fraction = 0.01;
  double seconds = 8;
  uint32_t window = 2;
  uint64_t seed = 1;
  std::string iface = "dsm0";
  std::string json_out;
};

int RunWriter(const WriterOptions& o) {
  const size_t lines = o.size / kLine;
  const size_t readers = o.peers.size();
  std::vector<int> fds;
  for (const std::string& peer : o.peers) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(o.port);
    if (inet_pton(AF_INET, peer.c_str(), &a.sin_addr) != 1) {
      std::fprintf(stderr, "tcp-fanout writer: bad peer address '%s'\n", peer.c_str());
      return 2;
    }
    int fd = -1;
    for (int tries = 0; tries < 100; ++tries) {  // the reader may still be starting (10 s at most)
      fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) break;
      close(fd);
      fd = -1;
      usleep(100000);
    }
    if (fd < 0) {
      std::fprintf(stderr, "tcp-fanout writer: cannot connect to %s:%u\n", peer.c_str(), o.port);
      return 1;
    }
    NoDelay(fd);
    fds.push_back(fd);
  }
  std::vector<uint8_t> area(o.size);
  std::vector<Record> out;
  std::vector<uint64_t> acked(readers, 0);
  std::vector<uint64_t> publish_ns(1, 0);
  std::vector<uint64_t> visible_ns(1, 0);  // the last reader's, per version
  // Reads acks until every reader acknowledged `version` (or a reader fails).
  const auto wait_acked = [&](uint64_t version) {
    for (;;) {
      bool all = true;
      for (size_t r = 0; r < readers; ++r) all &= acked[r] >= version;
      if (all) return true;
      std::vector<pollfd> ps;
      for (int fd : fds) ps.push_back({fd, POLLIN, 0});
      if (poll(ps.data(), ps.size(), 30000) <= 0) return false;
      for (size_t r = 0; r < readers; ++r) {
        if (!(ps[r].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Ack a;
        if (!ReadAll(fds[r], &a, sizeof(a))) return false;
        acked[r] = std::max(acked[r], a.version);
        if (a.version < visible_ns.size()) visible_ns[a.version] = std::max(visible_ns[a.version], a.visible_ns);
      }
    }
  };
  const auto publish = [&](uint64_t version) {
    RoundHeader h{version, static_cast<uint32_t>(out.size()), 0};
    publish_ns.push_back(NowNs());
    visible_ns.push_back(0);
    for (int fd : fds) {
      if (!WriteAll(fd, &h, sizeof(h)) || !WriteAll(fd, out.data(), out.size() * sizeof(Record))) {
        return false;
      }
    }
    return true;
  };
  // Version 1: the whole area.
  std::mt19937_64 rng(o.seed);
  for (size_t i = 0; i < o.size; ++i) area[i] = static_cast<uint8_t>(rng());
  out.resize(lines);
  for (size_t l = 0; l < lines; ++l) {
    out[l].index = static_cast<uint32_t>(l);
    std::memcpy(out[l].bytes, area.data() + l * kLine, kLine);
  }
  if (!publish(1) || !wait_acked(1)) {
    std::fprintf(stderr, "tcp-fanout writer: version 1 did not reach every reader\n");
    return 1;
  }
  // Measured rounds.
  const size_t per_round = std::max<size_t>(1, static_cast<size_t>(o.fraction * static_cast<double>(lines)));
  std::uniform_int_distribution<size_t> pick(1, lines - 1);
  std::vector<uint8_t> marked(lines, 0);
  std::vector<uint32_t> chosen;
  const uint64_t tx_start = TxBytes(o.iface);
  const uint64_t cpu_start = CpuNs();
  const uint64_t start = NowNs();
  const uint64_t stop = start + static_cast<uint64_t>(o.seconds * 1e9);
  uint64_t v = 1;
  uint64_t changed_bytes = 0;
  while (NowNs() < stop) {
    ++v;
    if (v > o.window && !wait_acked(v - o.window)) {
      std::fprintf(stderr, "tcp-fanout writer: a reader stopped acknowledging at version %lu\n",
                   static_cast<unsigned long>(v - o.window));
      return 1;
    }
    chosen.assign(1, 0);
    marked[0] = 1;
    while (chosen.size() < per_round) {
      const size_t l = pick(rng);
      if (!marked[l]) {
        marked[l] = 1;
        chosen.push_back(static_cast<uint32_t>(l));
      }
    }
    std::sort(chosen.begin(), chosen.end());
    out.resize(chosen.size());
    for (size_t i = 0; i < chosen.size(); ++i) {
      const uint32_t l = chosen[i];
      marked[l] = 0;
      auto* w = reinterpret_cast<uint64_t*>(area.data() + size_t{l} * kLine);
      for (int k = 0; k < 8; ++k) w[k] = v * 1000003 + l;
      out[i].index = l;
      std::memcpy(out[i].bytes, w, kLine);
    }
    changed_bytes += chosen.size() * kLine;
    if (!publish(v)) {
      std::fprintf(stderr, "tcp-fanout writer: a reader went away at version %lu\n", static_cast<unsigned long>(v));
      return 1;
    }
  }
  if (!wait_acked(v)) return 1;
  const uint64_t end = *std::max_element(visible_ns.begin() + 2, visible_ns.end());
  const double elapsed = static_cast<double>(end - publish_ns[2]) / 1e9;
  const uint64_t writer_cpu = CpuNs() - cpu_start;
  const uint64_t tx = TxBytes(o.iface) - tx_start;
  std::vector<double> latency_ms;
  for (uint64_t x = 2; x <= v; ++x) latency_ms.push_back(static_cast<double>(visible_ns[x] - publish_ns[x]) / 1e6);
  // The end: each reader's copy, and its CPU time.
  const uint64_t want = XXH3_64bits(area.data(), o.size);
  bool equal = true;
  json reader_cpu = json::array();
  json snapshot_pages = json::array();
  const uint64_t rounds = v - 1;
  for (int fd : fds) {
    const RoundHeader h{0, 0, kFlagEnd};
    Final f{};
    if (!WriteAll(fd, &h, sizeof(h)) || !ReadAll(fd, &f, sizeof(f))) return 1;
    equal &= f.hash == want;
    reader_cpu.push_back(static_cast<double>(f.cpu_ns) / 1e6 / static_cast<double>(f.versions));
    snapshot_pages.push_back(uint64_t{f.snapshot_page_bytes});
    close(fd);
  }
  const double rounds_per_sec = static_cast<double>(rounds) / elapsed;
  const json result = {
      {"tool", "tcp-fanout"},
      {"status", equal ? "ok" : "content_differs"},
      {"config",
       {{"readers", readers},
        {"area_bytes", o.size},
        {"fraction", o.fraction},
        {"window", o.window}}},
      {"results",
       {{"rounds", rounds},
        {"rounds_per_sec", rounds_per_sec},
        {"changed_bytes_per_sec", static_cast<double>(changed_bytes) / elapsed},
        {"latency_ms", {{"p50", Percentile(latency_ms, 50)}, {"p99", Percentile(latency_ms, 99)}}},
        {"wire_bytes_per_changed_byte",
         static_cast<double>(tx) / static_cast<double>(changed_bytes)},
        {"wire_bytes_per_changed_byte_per_copy", static_cast<double>(tx) /
                                                     static_cast<double>(changed_bytes) /
                                                     static_cast<double>(readers)},
        {"writer_cpu_ms_per_round",
         static_cast<double>(writer_cpu) / 1e6 / static_cast<double>(rounds)},
        {"reader_cpu_ms_per_round", reader_cpu},
        {"reader_snapshot_page_bytes", snapshot_pages}}}};
  std::printf("tcp-fanout R=%zu f=%g S=%zu: %lu rounds, %.1f rounds/s, %.1f MB/s changed, latency p50 %.3f ms "
              "p99 %.3f ms, wire %.3f B per changed B per copy, writer CPU %.3f ms/round, replicas %s\n",
              readers, o.fraction, o.size, static_cast<unsigned long>(rounds), rounds_per_sec,
              static_cast<double>(changed_bytes) / elapsed / 1e6, Percentile(latency_ms, 50),
              Percentile(latency_ms, 99), static_cast<double>(tx) / static_cast<double>(changed_bytes) / static_cast<double>(readers),
              static_cast<double>(writer_cpu) / 1e6 / static_cast<double>(rounds), equal ? "equal" : "DIFFER");
  if (!o.json_out.empty()) std::ofstream(o.json_out) << result.dump(2) << "\n";
  return equal ? 0 : 1;
}

size_t ParseSize(const std::string& s) {
  size_t pos = 0;
  const double v = std::stod(s, &pos);
  const std::string unit = s.substr(pos);
  const double mul = unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : 1.0;
  return static_cast<size_t>(v * mul);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tcp-fanout: the TCP fan-out reference for dsm-bench"};
  app.require_subcommand(1);
  std::string size = "64M";
  uint16_t port = 7500;
  auto* rd = app.add_subcommand("reader", "apply what the writer sends, acknowledge each version");
  rd->add_option("--port", port, "TCP port to listen on")->capture_default_str();
  rd->add_option("--size", size, "area bytes (K/M/G)")->capture_default_str();
  bool snapshots = false;
  rd->add_flag("--snapshots", snapshots,
               "keep versions atomic for the reader's users, as libdsm does (two buffers, a view "
               "remapped per version)");
  WriterOptions w;
  auto* wr = app.add_subcommand("writer", "change lines and send them to every reader");
  wr->add_option("--peer", w.peers, "a reader's IPv4 (one per reader)")->required();
  wr->add_option("--port", port, "the readers' TCP port")->capture_default_str();
  wr->add_option("--size", size, "area bytes (K/M/G)")->capture_default_str();
  wr->add_option("--fraction", w.fraction, "share of lines changed per round")->check(CLI::Range(0.0, 1.0));
  wr->add_option("--seconds", w.seconds, "measured time")->capture_default_str();
  wr->add_option("--window", w.window, "rounds a reader may lag")->check(CLI::Range(1u, 64u));
  wr->add_option("--seed", w.seed, "line choice")->capture_default_str();
  wr->add_option("--iface", w.iface, "interface whose tx bytes are the wire bytes")->capture_default_str();
  wr->add_option("--json", w.json_out, "write the result here");
  CLI11_PARSE(app, argc, argv);
  const size_t bytes = ParseSize(size);
  if (bytes < 2 * kLine || bytes % kLine != 0) {
    std::fprintf(stderr, "tcp-fanout: --size must be a multiple of %zu bytes, at least two lines\n", kLine);
    return 2;
  }
  if (rd->parsed()) return RunReader(port, bytes, snapshots);
  w.port = port;
  w.size = bytes;
  return RunWriter(w);
}
