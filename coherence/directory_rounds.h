// Which areas another host lists, known for sure only from whole listings.
// A host sends its directory every 40 ms as one numbered round of DIRECTORY
// frames (`seq` of `frame_count`, the round in `version`), sent together: a
// round received whole is a snapshot of that host's areas. An area that a
// replica here was made from and that two whole rounds in a row no longer
// list was freed there (or its name went to a new area): the replica is
// retired. One lost frame only delays that to the next whole round; frames
// of an older round arriving late never undo what a newer round said.
//
// One forged frame decides nothing for good: a single whole round listing
// nothing retires nothing (the round before still lists the area), a round
// of more than kMaxFrames frames is ignored, and a round number far ahead of
// the host's real ones is forgotten once kOlderFramesToDoubt frames of older
// rounds have come in a row since (the host goes on counting from where it
// really is). Pure.
#ifndef DSM_COHERENCE_DIRECTORY_ROUNDS_H_
#define DSM_COHERENCE_DIRECTORY_ROUNDS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace dsm {

class DirectoryRounds {
 public:
  // An area as the listing names it: (index, generation) on its host.
  using AreaId = std::pair<uint32_t, uint32_t>;

  // More frames than a round of every area a host can hold takes at the
  // smallest MTU.
  static constexpr uint32_t kMaxFrames = 4096;
  // Frames of rounds older than the newest completed, in a row, after which
  // that newest round is taken for a forgery and forgotten: a few rounds'
  // worth of a host's real frames.
  static constexpr uint32_t kOlderFramesToDoubt = 64;

  // Frame `seq` of `frame_count` of round `round` from `host`, listing `areas`.
  // When this frame completes a round newer than any completed before, and
  // an earlier round was completed too, returns the areas either of the two
  // lists (what is in neither is gone); nothing otherwise.
  std::optional<std::set<AreaId>> OnFrame(uint16_t host, uint64_t round, uint32_t seq,
                                          uint32_t frame_count, const std::vector<AreaId>& areas);
  // The host restarted: its rounds start again from 1.
  void Forget(uint16_t host) { hosts_.erase(host); }

 private:
  struct Assembly {
    uint64_t round = 0;  // being assembled
    uint32_t frame_count = 0;
    std::vector<bool> got;
    uint32_t missing = 0;
    std::set<AreaId> areas;
    uint64_t completed = 0;  // newest round completed
    bool has_previous = false;
    std::set<AreaId> previous;  // the areas of round `completed`
    uint32_t older_in_a_row = 0;
  };
  std::map<uint16_t, Assembly> hosts_;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_DIRECTORY_ROUNDS_H_
