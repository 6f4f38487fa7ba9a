#include "bench/stage_breakdown.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace dsm::bench {

namespace {

using nlohmann::json;

constexpr uint16_t kAllHosts = 0xffff;  // a transfer to every host (multicast)
constexpr const char* kStageNames[] = {"publish",  "wake",    "collect",         "plan",  "frame",
                                       "transmit", "receive", "replica publish", "reader"};
constexpr size_t kStages = std::size(kStageNames);

// (version, peer, stage name) -> first time marked, from one dsmd's timeline.
using Marks = std::map<std::tuple<uint64_t, uint16_t, std::string>, uint64_t>;

Marks Index(const json& timeline) {
  Marks m;
  if (!timeline.is_object() || !timeline.contains("events")) return m;
  for (const auto& e : timeline["events"]) {
    m.try_emplace({e[1].get<uint64_t>(), e[5].get<uint16_t>(), e[6].get<std::string>()},
                  e[0].get<uint64_t>());
  }
  return m;
}

bool Find(const Marks& m, uint64_t v, uint16_t peer, const char* stage, uint64_t* t) {
  auto it = m.find({v, peer, stage});
  if (it == m.end()) return false;
  *t = it->second;
  return true;
}

double Median(std::vector<double> x) {
  if (x.empty()) return 0;
  std::sort(x.begin(), x.end());
  return x[(x.size() - 1) / 2];
}

}  // namespace

json StageBreakdown(const StageInputs& in) {
  const Marks writer = Index(in.writer_host);
  std::vector<Marks> readers;
  std::vector<uint16_t> reader_host_id;
  for (const json& t : in.reader_host) {
    readers.push_back(Index(t));
    reader_host_id.push_back(t.is_object() ? t.value("host", uint16_t{0}) : uint16_t{0});
  }
  std::array<std::vector<double>, kStages> ms, share;
  std::vector<double> totals, overlap;
  std::array<std::vector<double>, kStages> raw;  // each stage's end, from publish_begin, unclamped
  uint64_t skipped = 0;
  for (uint64_t v = in.first_version; v <= in.last_version && !readers.empty(); ++v) {
    // The reader that saw it last decides when it was visible everywhere.
    uint32_t last = 0;
    for (uint32_t r = 1; r < readers.size(); ++r) {
      if (in.seen(r, v) > in.seen(last, v)) last = r;
    }
    const uint16_t host = reader_host_id[last];
    std::array<uint64_t, kStages + 1> b{};
    b[0] = in.publish_begin(v);
    b[1] = in.publish_end(v);
    const auto sent = [&](const char* stage, uint64_t* t) {
      return Find(writer, v, host, stage, t) || Find(writer, v, kAllHosts, stage, t);
    };
    bool ok = Find(writer, v, kAllHosts, "collect_begin", &b[2]) &&
              Find(writer, v, kAllHosts, "collected", &b[3]) && sent("planned", &b[4]) &&
              sent("framed", &b[5]) && sent("transmitted", &b[6]);
    // The replica's marks carry the writer's host as peer: any peer will do.
    bool assembled = false, published = false, first = false;
    uint64_t first_frame = 0;
    const Marks& replica = readers[last];
    for (auto it = replica.lower_bound({v, 0, std::string()});
         it != replica.end() && std::get<0>(it->first) == v; ++it) {
      if (std::get<2>(it->first) == "assembled") assembled = (b[7] = it->second, true);
      if (std::get<2>(it->first) == "published") published = (b[8] = it->second, true);
      if (std::get<2>(it->first) == "first_frame") first = (first_frame = it->second, true);
    }
    b[9] = in.seen(last, v);
    ok = ok && assembled && published && b[9] != 0;
    if (!ok) {
      ++skipped;
      continue;
    }
    // How far receiving overlaps framing: the first frame taken in, from the plan.
    if (first)
      overlap.push_back((static_cast<double>(first_frame) - static_cast<double>(b[4])) / 1e6);
    for (size_t i = 1; i < b.size(); ++i) {
      raw[i - 1].push_back((static_cast<double>(b[i]) - static_cast<double>(b[0])) / 1e6);
    }
    for (size_t i = 1; i < b.size(); ++i) b[i] = std::max(b[i], b[i - 1]);
    const double total = static_cast<double>(b[kStages] - b[0]) / 1e6;
    totals.push_back(total);
    for (size_t s = 0; s < kStages; ++s) {
      const double d = static_cast<double>(b[s + 1] - b[s]) / 1e6;
      ms[s].push_back(d);
      share[s].push_back(total > 0 ? d / total : 0.0);
    }
  }
  json stages = json::array();
  for (size_t s = 0; s < kStages; ++s) {
    stages.push_back({{"name", kStageNames[s]},
                      {"p50_ms", Median(ms[s])},
                      {"share_p50", Median(share[s])},
                      {"end_after_publish_call_ms_p50", Median(raw[s])}});
  }
  return {{"versions", totals.size()},
          {"skipped", skipped},
          {"total_ms_p50", Median(totals)},
          {"first_frame_after_plan_ms_p50", Median(overlap)},
          {"stages", stages}};
}

}  // namespace dsm::bench
