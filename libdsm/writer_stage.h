// The writer's side of an area's stage (libdsm/contract/stage_layout.h): it
// hands each version to dsmd, which writes it into a reader buffer while the
// writer goes on. A sparse version is gathered into the stage and the publish
// returns at once; a version too large for it is posted as masks and the
// writer waits while dsmd copies its lines from the writer copy.
#ifndef DSM_LIBDSM_WRITER_STAGE_H_
#define DSM_LIBDSM_WRITER_STAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "coherence/change_log.h"
#include "libdsm/contract/shm_layout.h"
#include "libdsm/contract/stage_layout.h"

namespace dsm {

// The longest a publish waits for dsmd to take the version before it (or,
// posted as masks, its own) before it says busy. dsmd takes one within a
// loop turn; this bounds a publish when dsmd cannot keep up.
inline constexpr uint64_t kStageWaitNs = 200'000'000;

// What a staged writer needs of its session.
struct DaemonLink {
  std::function<void()> ring_doorbell;  // wakes dsmd if it sleeps
  std::function<bool()> daemon_alive;
};

class WriterStage {
 public:
  // nullptr if the area has no stage (the writer publishes itself); sets
  // dsm_last_error and *failed if it has one that cannot be mapped.
  static std::unique_ptr<WriterStage> Map(AreaControl* control, int region_fd, DaemonLink link,
                                          bool* failed);
  ~WriterStage();
  WriterStage(const WriterStage&) = delete;
  WriterStage& operator=(const WriterStage&) = delete;

  // Waits (at most `timeout_ns`) until dsmd took the version posted before.
  // DSM_OK: the stage is free. DSM_ERR_BUSY (message set): it still holds
  // that version (readers pin every spare buffer, or dsmd is slow).
  // DSM_ERR_DAEMON_GONE: dsmd is gone and will never take it.
  int WaitFree(uint64_t timeout_ns);
  // Drains `log` into the stage as `version` (the stage must be free),
  // posts it and wakes dsmd. A version posted as masks is waited for: DSM_OK
  // once dsmd wrote it, DSM_ERR_BUSY if it was withdrawn (its lines stay in
  // the stage for the next version), DSM_ERR_DAEMON_GONE.
  int Post(ChangeLog& log, const uint8_t* src, uint64_t version, uint64_t timeout_ns);
  // Whether dsmd has taken every version posted (readers have the writer's
  // state as of its last publish).
  bool Drained() const;
  // Whether a withdrawn version's lines wait in the stage for the next publish.
  bool Withdrawn() const { return state() == StageState::kCancelled; }

 private:
  WriterStage(AreaControl* control, uint8_t* base, DaemonLink link);
  StageState state() const { return static_cast<StageState>(control_->stage_state.load()); }
  // Waits for a version posted as masks until dsmd wrote it or it is withdrawn.
  int AwaitMasks(uint64_t timeout_ns);

  AreaControl* control_;
  uint8_t* base_;
  StageGeometry geometry_;
  StageMemory memory_;
  DaemonLink link_;
};

}  // namespace dsm

#endif  // DSM_LIBDSM_WRITER_STAGE_H_
