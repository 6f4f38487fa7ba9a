#include "daemon/dsmctl_timeline.h"

#include <atomic>
#include <cstdio>
#include <map>
#include <tuple>
#include <vector>

#include "coherence/stage_marks.h"

namespace dsm {

namespace {

struct Origin {
  uint32_t host, index, generation;
};

// Copies the ring, keeping only events no write overtook while copying.
std::vector<TimelineEvent> Snapshot(const StageTimeline& ring) {
  const uint64_t end = ring.written.load(std::memory_order_acquire);
  const uint64_t begin = end > kTimelineEvents ? end - kTimelineEvents : 0;
  std::vector<TimelineEvent> out;
  out.reserve(end - begin);
  for (uint64_t i = begin; i < end; ++i) out.push_back(ring.events[i % kTimelineEvents]);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t now = ring.written.load(std::memory_order_acquire);
  const uint64_t valid_from = now > kTimelineEvents ? now - kTimelineEvents : 0;
  if (valid_from > begin)
    out.erase(out.begin(),
              out.begin() + static_cast<ptrdiff_t>(std::min(valid_from - begin, out.size())));
  return out;
}

}  // namespace

nlohmann::json TimelineJson(const ControlSegment& seg, const std::string& area,
                            std::string* error) {
  bool filter = false;
  Origin want{};
  if (!area.empty()) {
    for (uint32_t i = 0; i < kMaxAreas && !filter; ++i) {
      const AreaControl& a = seg.areas[i];
      if (a.state.load() == static_cast<uint32_t>(AreaState::kFree) || area != a.name) continue;
      want = a.is_replica ? Origin{a.origin_host, a.origin_index, a.origin_generation}
                          : Origin{seg.header.host_id, i, a.generation};
      filter = true;
    }
    if (!filter) {
      *error = "no area named '" + area + "' on this host (dsmctl areas lists them)";
      return nullptr;
    }
  }
  nlohmann::json events = nlohmann::json::array();
  for (const TimelineEvent& e : Snapshot(seg.timeline)) {
    if (filter && (e.origin_host != want.host || e.origin_index != want.index ||
                   e.origin_generation != want.generation)) {
      continue;
    }
    events.push_back({e.t_ns, e.version, e.origin_host, e.origin_index, e.origin_generation, e.peer,
                      StageName(static_cast<Stage>(e.stage))});
  }
  return {
      {"host", seg.header.host_id},
      {"columns",
       {"t_ns", "version", "origin_host", "origin_index", "origin_generation", "peer", "stage"}},
      {"events", events}};
}

void PrintTimeline(const nlohmann::json& timeline, size_t last_versions) {
  // (origin host, index, generation, version) -> stage -> first time marked
  using Key = std::tuple<uint32_t, uint32_t, uint32_t, uint64_t>;
  std::map<Key, std::map<std::string, uint64_t>> versions;
  std::vector<Key> order;
  for (const auto& e : timeline["events"]) {
    const Key k{e[2].get<uint32_t>(), e[3].get<uint32_t>(), e[4].get<uint32_t>(),
                e[1].get<uint64_t>()};
    auto [it, fresh] = versions.try_emplace(k);
    if (fresh) order.push_back(k);
    it->second.try_emplace(e[6].get<std::string>(), e[0].get<uint64_t>());
  }
  std::printf("%-14s %10s", "AREA", "VERSION");
  for (int s = 1; s <= kStageCount; ++s) std::printf(" %13s", StageName(static_cast<Stage>(s)));
  std::printf("\n");
  const size_t from = order.size() > last_versions ? order.size() - last_versions : 0;
  for (size_t i = from; i < order.size(); ++i) {
    const Key& k = order[i];
    const auto& stages = versions[k];
    uint64_t first = UINT64_MAX;
    for (const auto& [name, t] : stages) first = std::min(first, t);
    char area[32];
    std::snprintf(area, sizeof(area), "%u:%u.%u", std::get<0>(k), std::get<1>(k), std::get<2>(k));
    std::printf("%-14s %10lu", area, static_cast<unsigned long>(std::get<3>(k)));
    for (int s = 1; s <= kStageCount; ++s) {
      auto it = stages.find(StageName(static_cast<Stage>(s)));
      if (it == stages.end()) {
        std::printf(" %13s", "-");
      } else {
        std::printf(" %13.1f", static_cast<double>(it->second - first) / 1e3);
      }
    }
    std::printf("\n");
  }
  std::printf(
      "(µs after the version's first mark on this host; AREA is origin host:index.generation)\n");
}

}  // namespace dsm
