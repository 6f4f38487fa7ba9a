// dsmd's side of staged publishes (libdsm/contract/stage_layout.h): for each
// local area whose writer hands its versions over in a stage, dsmd writes
// them into reader buffers as a writer's own publish would (the same publish
// and export protocol), and from then on keeps what each buffer lacks
// (VersionPublisher). The writer's publish is then a gather of its changed
// lines, and the copies into the buffers run beside the writer, not in it.
#ifndef DSM_DAEMON_STAGE_APPLIER_H_
#define DSM_DAEMON_STAGE_APPLIER_H_

#include <cstdint>
#include <map>
#include <memory>

#include "coherence/area_export.h"
#include "coherence/line_set.h"
#include "coherence/version_publisher.h"
#include "daemon/post_forecast.h"
#include "libdsm/contract/shm_layout.h"
#include "libdsm/contract/stage_layout.h"

namespace dsm {

// When a turn may put off a version posted as lines: nothing on this host
// waits for it until the writer wants the stage back.
struct ApplyTurn {
  // dsmd is sending frames to other hosts this turn: a version the export
  // claimed (its frames read from the stage), written now, would hold up
  // the frames that carry it.
  bool shipping = false;
  // The loop comes back (woken by frames, or by the writer's doorbell): a
  // version that could go in place but for dsmd's own pin on the latest
  // buffer (its export's, until every host holds that version and the
  // device has sent what read it) waits for that pin to go, rather than go
  // to a spare that missed every version since it was last written. (The
  // export may claim it meanwhile, and frame it from the stage.)
  bool may_wait_for_pin = false;
};

// One area's applier.
class StageApplier {
 public:
  StageApplier(AreaControl* area, uint8_t* backing);

  // Writes the posted version into a spare buffer (or in place, see
  // Apply's body), if one is posted and a spare is free (else marks the
  // stage blocked). Returns whether it did. `turn`: whether a version
  // posted as lines may wait.
  bool Apply(uint64_t now_ns, ApplyTurn turn = {});
  // Brings the buffer the next version will likely go to up to the version
  // applied last (as a writer's publish does after its version is out), if
  // it is owed one. Apart from Apply, so that frames for other hosts go first.
  void CatchUp();
  bool Posted() const;
  bool Blocked() const { return area_->stage_blocked.load() != 0; }
  // The posted version waits for dsmd's own pin to go (ApplyTurn).
  bool AwaitingPin() const { return awaiting_pin_; }
  uint32_t generation() const { return generation_; }

  // The export's claim on a posted version (ExportHost::ClaimStage): it is
  // written without logging its lines for export, its buffer is pinned in
  // the export's `reader_slot` as it becomes visible, and the stage is held
  // (kHeld) until ReleaseClaim.
  bool PostedLines(StagedVersion* out) const;
  void Claim(uint32_t reader_slot);
  bool ClaimWritten(int* buffer) const;
  void ReleaseClaim();
  // The writer waits for a held stage.
  bool Wanted() const { return area_->stage_wanted.load() != 0; }

  // Feeds a version posted since the last call to the forecast of the next.
  void NotePost();
  // Every host replicating the area holds `version` (the newest all have
  // acknowledged), as of `now_ns`: if that is the last posted version, the
  // forecast hears of its delivery.
  void NoteDelivered(uint64_t version, uint64_t now_ns);
  PostForecast& forecast() { return forecast_; }

 private:
  // The area is still the one this applier was made for.
  bool Current() const;
  struct StageClaim {
    bool active = false;
    uint64_t version = 0;
    uint32_t reader_slot = 0;
    int buffer = -1;  // written there
  };

  AreaControl* area_;
  uint8_t* backing_;
  uint32_t generation_;
  StageGeometry geometry_;
  StageMemory stage_;
  VersionPublisher publisher_;
  uint8_t* buffers_[kMaxReaderBuffers] = {};  // the area's reader buffers
  LineSet masked_;  // a version posted as masks, or one written in place to log
  bool catch_up_owed_ = false;
  bool awaiting_pin_ = false;
  StageClaim claim_;
  PostForecast forecast_;
  uint64_t noted_version_ = 0;  // the last posted version NotePost saw
};

// The appliers of every local area with a stage.
class StageAppliers {
 public:
  StageAppliers(ControlSegment* segment, uint8_t* backing) : segment_(segment), backing_(backing) {}

  // A writer allocated area `index` (with or without a stage).
  void Added(uint32_t index);
  // Area `index`'s applier if it has a stage (for its export to claim from).
  std::shared_ptr<StageApplier> Find(uint32_t index) const;
  // Applies every posted version (call before the area's memory may go: a
  // free, a writer gone: the default `turn`, where nothing waits). Returns
  // whether anything was applied.
  bool Turn(uint64_t now_ns, ApplyTurn turn = {});
  // The catch-ups the last Turn left (StageApplier::CatchUp).
  void CatchUps();
  // A posted version waits that a turn could apply now (not one waiting for
  // dsmd's pin: frames or the writer's doorbell wake dsmd for that).
  bool AnyDue() const;
  // A posted version waits for readers to free a buffer: dsmd must look again
  // soon, as readers do not wake it.
  bool AnyBlocked() const;
  // For the loop's sleep: 0 while a writer's next version is forecast
  // (PostForecast), the time until the next such window opens, or -1 if
  // none is. A window that passed without its version ends its forecast.
  int64_t PostPollSleepNs(uint64_t now_ns);

 private:
  ControlSegment* segment_;
  uint8_t* backing_;
  std::map<uint32_t, std::shared_ptr<StageApplier>> appliers_;  // by area index
};

}  // namespace dsm

#endif  // DSM_DAEMON_STAGE_APPLIER_H_
