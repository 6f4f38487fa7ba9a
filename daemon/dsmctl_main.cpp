// dsmctl: inspect a host's dsmd: hosts, areas (with a hash of each replica's
// content, so operators can check replicas agree), counters, and the sync
// epochs (versions published and applied on the host) with their pause times.
//
//   dsmctl [--socket S] [--json] hosts|areas|counters|all
//   dsmctl [--socket S] watch [--interval-ms N] [--count N]
//   dsmctl [--socket S] [--json] timeline [--area NAME] [--versions N]
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "coherence/version_publisher.h"
#include "coherence/wire_format.h"
#include "daemon/dsmctl_timeline.h"
#include "dsm/dsm.h"
#include "libdsm/contract/clock.h"
#include "libdsm/contract/control_protocol.h"
#include "libdsm/contract/shm_layout.h"
#include "libdsm/contract/tracking_names.h"
#include "libdsm/contract/socket_io.h"

namespace {

using nlohmann::json;

struct Daemon {
  const dsm::ControlSegment* seg = nullptr;
  int region_fd = -1;
};

// Says hello like a client and maps the control segment read-only.
bool Connect(const std::string& path, Daemon* d, std::string* error) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *error = "no dsmd at " + path + " (" + std::strerror(errno) + ")";
    close(fd);
    return false;
  }
  dsm::Request req{};
  req.magic = dsm::kProtocolMagic;
  req.protocol_version = dsm::kProtocolVersion;
  req.type = dsm::RequestType::kHello;
  req.pid = getpid();
  dsm::Reply reply{};
  int fds[2] = {-1, -1};
  if (dsm::SendMessage(fd, &req, sizeof(req)) != 0 ||
      dsm::RecvMessage(fd, &reply, sizeof(reply), fds, 2000) != static_cast<long>(sizeof(reply)) ||
      fds[0] < 0) {
    *error = "dsmd at " + path + " did not answer";
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, sizeof(dsm::ControlSegment), PROT_READ, MAP_SHARED, fds[0], 0);
  close(fds[0]);
  close(fd);  // the mapping and the region fd outlive the connection
  if (p == MAP_FAILED) {
    *error = "cannot map the control segment";
    return false;
  }
  d->seg = static_cast<const dsm::ControlSegment*>(p);
  d->region_fd = fds[1];
  if (d->seg->header.magic != dsm::kControlMagic ||
      d->seg->header.layout_version != dsm::kLayoutVersion) {
    *error = "dsmd at " + path + " uses another shared layout version: rebuild dsmctl";
    return false;
  }
  return true;
}

const char* StateName(uint32_t s) {
  switch (static_cast<dsm::AreaState>(s)) {
    case dsm::AreaState::kLive: return "live";
    case dsm::AreaState::kSealed: return "writer-gone";
    case dsm::AreaState::kFreed: return "freed";
    default: return "free";
  }
}

// XXH3 of the newest complete version, read without pinning: valid only if no
// publish replaced that version meanwhile (the writer never writes the latest).
json ContentHash(const Daemon& d, const dsm::AreaControl& a) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const uint64_t word = a.latest.load();
    const dsm::LatestVersion l = dsm::UnpackLatest(word);
    void* p = mmap(nullptr, a.mapped_size, PROT_READ, MAP_SHARED, d.region_fd,
                   static_cast<off_t>(a.buffer_offset[l.buffer]));
    if (p == MAP_FAILED) return nullptr;
    const uint64_t h = XXH3_64bits(p, a.size);
    munmap(p, a.mapped_size);
    if (a.latest.load() == word) {
      char hex[17];
      std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
      return json{{"version", l.version}, {"xxh3", hex}};
    }
  }
  return nullptr;
}

json Areas(const Daemon& d) {
  json out = json::array();
  const uint64_t now = dsm::MonotonicNs();
  for (uint32_t i = 0; i < dsm::kMaxAreas; ++i) {
    const dsm::AreaControl& a = d.seg->areas[i];
    const uint32_t state = a.state.load();
    if (state == static_cast<uint32_t>(dsm::AreaState::kFree)) continue;
    int readers = 0;
    for (const auto& c : a.reader_client) readers += c.load() != 0 && c.load() != 0xffffffffu;
    const uint64_t confirmed = a.confirmed_ns.load();
    const uint64_t publishes = a.publishes.load();
    out.push_back(
        {{"index", i},
         {"name", a.name},
         {"state", StateName(state)},
         {"owner_host", a.owner_host},
         {"replica", a.is_replica != 0},
         {"size", a.size},
         {"version", dsm::UnpackLatest(a.latest.load()).version},
         {"staleness_ms", confirmed == 0 || now < confirmed ? 0.0 : (now - confirmed) / 1e6},
         {"readers", readers},
         {"publishes", publishes},
         {"publishes_deferred", a.publishes_deferred.load()},
         {"bytes_published", a.bytes_published.load()},
         {"bytes_caught_up", a.bytes_caught_up.load()},
         {"staged_publishes", a.staged_publishes.load()},
         {"staged_in_place", a.staged_in_place.load()},
         {"staged_forecast_hits", a.staged_forecast_hits.load()},
         {"publish_ms_max", a.publish_ns_max.load() / 1e6},
         {"publish_ms_avg", publishes ? a.publish_ns_total.load() / 1e6 / publishes : 0.0},
         {"exported", a.export_enabled.load() != 0},
         {"tracking", dsm::TrackingName(a.tracking.load())},
         {"page_tracker", dsm::PageTrackerName(a.page_tracker.load())},
         {"pages_written", a.pages_written.load()},
         {"lines_changed", a.lines_changed.load()},
         {"managed", a.managed_budget_bytes_per_s != 0},
         {"managed_budget_bytes_per_s", a.managed_budget_bytes_per_s},
         {"managed_max_line_age", a.managed_max_line_age},
         {"managed_residual_lines", a.managed_residual_lines.load()},
         {"managed_oldest_lag", a.managed_oldest_lag.load()},
         {"content", ContentHash(d, a)}});
  }
  return out;
}

json Hosts(const Daemon& d) {
  json out = json::array();
  const uint64_t now = dsm::MonotonicNs();
  const auto& h = d.seg->header;
  if (h.cluster_hosts == 0) {
    out.push_back({{"id", h.host_id}, {"up", true}, {"self", true}, {"last_heard_ms_ago", 0},
                   {"region_used_bytes", h.backing_used_bytes.load()},
                   {"region_bytes", h.backing_bytes}});
    return out;
  }
  for (uint32_t id = 0; id < dsm::kMaxHosts; ++id) {
    const dsm::HostInfo& info = h.hosts[id];
    if (!info.in_cluster) continue;
    char incarnation[9];
    std::snprintf(incarnation, sizeof(incarnation), "%08x", info.incarnation);
    out.push_back({{"id", id},
                   {"up", info.up != 0},
                   {"self", id == h.host_id},
                   {"incarnation", incarnation},
                   {"region_used_bytes", info.region_used_bytes},
                   {"region_bytes", info.region_bytes},
                   {"last_heard_ms_ago",
                    info.last_heard_ns == 0 ? -1.0 : (now - info.last_heard_ns) / 1e6}});
  }
  return out;
}

json Counters(const Daemon& d) {
  const dsm::RemoteCounters& c = d.seg->header.remote;
  json drops = json::object();
  for (size_t r = 1; r < static_cast<size_t>(dsm::wire::DropReason::kCount); ++r) {
    drops[dsm::wire::DropReasonName(static_cast<dsm::wire::DropReason>(r))] = c.dropped[r];
  }
  return {{"frames_in", c.frames_in},
          {"dropped", drops},
          {"data_frames_out", c.data_frames_out},
          {"data_bytes_out", c.data_bytes_out},
          {"changed_bytes_out", c.changed_bytes_out},
          {"transfers_sent", c.transfers_sent},
          {"retransmitted_frames", c.retransmitted_frames},
          {"versions_collected", c.versions_collected},
          {"versions_received", c.versions_received},
          {"versions_received_in_place", c.versions_received_in_place},
          {"versions_received_forward", c.versions_received_forward},
          {"versions_written_in_place", c.versions_written_in_place},
          {"versions_shadowed", c.versions_shadowed},
          {"pins_yielded", c.pins_yielded},
          {"versions_from_stage", c.versions_from_stage},
          {"frames_from_stage", c.frames_from_stage},
          {"managed_lines_deferred", c.managed_lines_deferred},
          {"managed_due_lines", c.managed_due_lines},
          {"managed_over_budget_bytes", c.managed_over_budget_bytes},
          {"acks_in", c.acks_in},
          {"acks_out", c.acks_out},
          {"replica_resyncs", c.replica_resyncs},
          {"tx_frames", c.tx_frames},
          {"tx_bytes", c.tx_bytes},
          {"tx_dropped", c.tx_dropped},
          {"tx_tail_frames", c.tx_tail_frames},
          {"rx_frames", c.rx_frames},
          {"rx_bytes", c.rx_bytes},
          {"rx_dropped_malformed", c.rx_dropped_malformed},
          {"rx_dropped_not_for_us", c.rx_dropped_not_for_us},
          {"rx_dropped_unknown_source", c.rx_dropped_unknown_source},
          {"faults_injected", c.faults_injected},
          {"loop_turns", c.loop_turns},
          {"signing_key_id", c.signing_key_id},
          {"keys_held", c.keys_held},
          {"key_reloads", c.key_reloads}};
}

// Sync epochs on this host: versions made by its writers' publishes and by the
// daemon applying remote versions to replicas, and the pauses publishing cost.
json Sync(const json& areas) {
  uint64_t local = 0, replica = 0, deferred = 0;
  double pause_total_ms = 0, pause_max_ms = 0;
  for (const json& a : areas) {
    const uint64_t n = a["publishes"].get<uint64_t>();
    (a["replica"].get<bool>() ? replica : local) += n;
    deferred += a["publishes_deferred"].get<uint64_t>();
    pause_total_ms += a["publish_ms_avg"].get<double>() * static_cast<double>(n);
    pause_max_ms = std::max(pause_max_ms, a["publish_ms_max"].get<double>());
  }
  return {{"local_publishes", local},
          {"replica_versions_applied", replica},
          {"publishes_deferred", deferred},
          {"publish_pause_ms_total", pause_total_ms},
          {"publish_pause_ms_max", pause_max_ms}};
}

void PrintTable(const json& j, const std::string& what) {
  if (what == "hosts" || what == "all") {
    std::printf("%-4s %-5s %-5s %-11s %-19s %s\n", "HOST", "UP", "SELF", "INCARNATION",
                "REGION USED (MiB)", "LAST HEARD");
    for (const auto& h : j["hosts"]) {
      char region[32];
      std::snprintf(region, sizeof(region), "%.1f / %.1f",
                    h["region_used_bytes"].get<double>() / 1048576.0,
                    h["region_bytes"].get<double>() / 1048576.0);
      std::printf("%-4d %-5s %-5s %-11s %-19s %.1f ms ago\n", h["id"].get<int>(),
                  h["up"].get<bool>() ? "up" : "DOWN", h["self"].get<bool>() ? "yes" : "",
                  h.value("incarnation", std::string("-")).c_str(), region,
                  h["last_heard_ms_ago"].get<double>());
    }
  }
  if (what == "areas" || what == "all") {
    std::printf("%-24s %-11s %4s %7s %10s %10s %9s %4s %-13s %-14s %s\n", "AREA", "STATE", "HOST",
                "REPLICA", "SIZE", "VERSION", "STALE ms", "RDRS", "TRACKING", "WAITING/LAG",
                "XXH3 (version)");
    for (const auto& a : j["areas"]) {
      std::string hash = "-";
      if (!a["content"].is_null()) {
        hash = a["content"]["xxh3"].get<std::string>() + " (" +
               std::to_string(a["content"]["version"].get<uint64_t>()) + ")";
      }
      // Page-tracked areas show their mechanism; replicas track nothing here.
      std::string tracking = a["replica"].get<bool>() ? "-" : a["tracking"].get<std::string>();
      if (a["page_tracker"] != "none") tracking = a["page_tracker"].get<std::string>();
      // Managed areas: lines the writer's host has not sent yet / the
      // versions the oldest of them lags.
      const std::string waiting =
          a["managed"].get<bool>()
              ? std::to_string(a["managed_residual_lines"].get<uint64_t>()) + "/" +
                    std::to_string(a["managed_oldest_lag"].get<uint64_t>())
              : "-";
      std::printf("%-24s %-11s %4d %7s %10lu %10lu %9.1f %4d %-13s %-14s %s\n",
                  a["name"].get<std::string>().c_str(), a["state"].get<std::string>().c_str(),
                  a["owner_host"].get<int>(), a["replica"].get<bool>() ? "yes" : "no",
                  static_cast<unsigned long>(a["size"].get<uint64_t>()),
                  static_cast<unsigned long>(a["version"].get<uint64_t>()),
                  a["staleness_ms"].get<double>(), a["readers"].get<int>(), tracking.c_str(),
                  waiting.c_str(), hash.c_str());
    }
  }
  if (what == "counters" || what == "all") {
    for (const auto& [k, v] : j["counters"].items()) {
      if (k == "dropped") {
        for (const auto& [r, n] : v.items()) std::printf("  dropped.%-22s %lu\n", r.c_str(), static_cast<unsigned long>(n.get<uint64_t>()));
      } else {
        std::printf("  %-30s %lu\n", k.c_str(), static_cast<unsigned long>(v.get<uint64_t>()));
      }
    }
    for (const auto& [k, v] : j["sync"].items()) {
      if (v.is_number_float()) {
        std::printf("  sync.%-25s %.3f\n", k.c_str(), v.get<double>());
      } else {
        std::printf("  sync.%-25s %lu\n", k.c_str(), static_cast<unsigned long>(v.get<uint64_t>()));
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dsmctl: inspect a host's dsmd (hosts, areas, counters)"};
  std::string socket_path = std::getenv("DSM_SOCKET") ? std::getenv("DSM_SOCKET") : DSM_DEFAULT_SOCKET;
  std::string what = "all";
  bool as_json = false;
  int interval_ms = 1000;
  int count = 0;
  app.add_option("--socket", socket_path, "The daemon's socket ($DSM_SOCKET)")->capture_default_str();
  app.add_flag("--json", as_json, "JSON instead of tables");
  std::string timeline_area;
  size_t timeline_versions = 20;
  app.add_option("what", what, "hosts, areas, counters, all, watch or timeline")
      ->check(CLI::IsMember({"hosts", "areas", "counters", "all", "watch", "timeline"}));
  app.add_option("--area", timeline_area, "timeline: only this area's marks");
  app.add_option("--versions", timeline_versions,
                 "timeline: the newest this many versions (table)");
  app.add_option("--interval-ms", interval_ms, "watch: refresh period")->check(CLI::Range(50, 60000));
  app.add_option("--count", count, "watch: stop after this many refreshes (0: until Ctrl-C)")
      ->check(CLI::Range(0, 1000000));
  CLI11_PARSE(app, argc, argv);

  Daemon d;
  std::string error;
  if (!Connect(socket_path, &d, &error)) {
    std::fprintf(stderr, "dsmctl: %s\n", error.c_str());
    return 1;
  }
  if (what == "timeline") {
    const nlohmann::json t = dsm::TimelineJson(*d.seg, timeline_area, &error);
    if (t.is_null()) {
      std::fprintf(stderr, "dsmctl: %s\n", error.c_str());
      return 1;
    }
    if (as_json) {
      std::printf("%s\n", t.dump().c_str());
    } else {
      dsm::PrintTimeline(t, timeline_versions);
    }
    return 0;
  }
  const bool watch = what == "watch";
  for (int i = 0; !watch || count == 0 || i < count; ++i) {
    const json areas = Areas(d);
    const json j = {{"host", d.seg->header.host_id},
                    {"daemon_alive", d.seg->header.daemon_alive.load() != 0},
                    {"daemon_pid", d.seg->header.daemon_pid},
                    {"hosts", Hosts(d)},
                    {"areas", areas},
                    {"counters", Counters(d)},
                    {"sync", Sync(areas)}};
    if (watch) std::printf("\033[2J\033[H");
    if (as_json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("dsmd host %u%s\n", d.seg->header.host_id,
                  d.seg->header.daemon_alive.load() ? "" : " (stopped)");
      PrintTable(j, watch ? "all" : what);
    }
    std::fflush(stdout);
    if (!watch) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  return 0;
}
