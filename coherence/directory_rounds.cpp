#include "coherence/directory_rounds.h"

namespace dsm {

std::optional<std::set<DirectoryRounds::AreaId>> DirectoryRounds::OnFrame(
    uint16_t host, uint64_t round, uint32_t seq, uint32_t frame_count,
    const std::vector<AreaId>& areas) {
  Assembly& a = hosts_[host];
  if (frame_count == 0 || seq >= frame_count || round <= a.completed) return std::nullopt;
  if (round < a.round) return std::nullopt;  // a late frame of a round given up
  if (round > a.round || frame_count != a.frame_count) {
    // A newer round (or one that disagrees on its size: start it over).
    a.round = round;
    a.frame_count = frame_count;
    a.got.assign(frame_count, false);
    a.missing = frame_count;
    a.areas.clear();
  }
  if (a.got[seq]) return std::nullopt;  // duplicate
  a.got[seq] = true;
  --a.missing;
  a.areas.insert(areas.begin(), areas.end());
  if (a.missing != 0) return std::nullopt;
  a.completed = round;
  a.got.clear();
  return std::move(a.areas);
}

}  // namespace dsm
