#include "coherence/directory_rounds.h"

namespace dsm {

std::optional<std::set<DirectoryRounds::AreaId>> DirectoryRounds::OnFrame(
    uint16_t host, uint64_t round, uint32_t seq, uint32_t frame_count,
    const std::vector<AreaId>& areas) {
  if (frame_count == 0 || frame_count > kMaxFrames || seq >= frame_count) return std::nullopt;
  Assembly& a = hosts_[host];
  // Older than the newest round completed, or a late frame of a round given up.
  if (round <= a.completed || round < a.round) {
    if (++a.older_in_a_row < kOlderFramesToDoubt) return std::nullopt;
    a = Assembly{};  // the newest round was not the host's: start over from this one
  }
  a.older_in_a_row = 0;
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
  std::optional<std::set<AreaId>> either;
  if (a.has_previous) {
    either = a.previous;
    either->insert(a.areas.begin(), a.areas.end());
  }
  a.previous = std::move(a.areas);
  a.areas.clear();
  a.has_previous = true;
  return either;
}

}  // namespace dsm
