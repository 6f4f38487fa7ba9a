// Which areas another host lists, known for sure only from a whole listing.
// A host sends its directory every few hundred ms as one numbered round of
// DIRECTORY frames (`seq` of `frame_count`, the round in `version`), sent
// together: a round received whole is a snapshot of that host's areas. An
// area that a replica here was made from and that a later whole round no
// longer lists was freed there (or its name went to a new area): the replica
// is retired. One lost frame only delays that to the next whole round; frames
// of an older round arriving late never undo what a newer round said. Pure.
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

  // Frame `seq` of `frame_count` of round `round` from `host`, listing `areas`.
  // Returns the round's areas when this frame completes a round newer than any
  // completed before; nothing otherwise.
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
  };
  std::map<uint16_t, Assembly> hosts_;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_DIRECTORY_ROUNDS_H_
