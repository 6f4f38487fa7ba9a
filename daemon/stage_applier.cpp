#include "daemon/stage_applier.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "libdsm/contract/publish_protocol.h"

namespace dsm {

StageApplier::StageApplier(AreaControl* area, uint8_t* backing)
    : area_(area),
      backing_(backing),
      generation_(area->generation),
      geometry_(StageGeometryFor(area->size, 1)),
      stage_(StageMemoryAt(backing + area->stage_offset, geometry_)),
      publisher_(area->size, area->buffer_count),
      masked_(area->size) {
  for (uint32_t b = 0; b < area->buffer_count; ++b) {
    buffers_[b] = backing + area->buffer_offset[b];
  }
  std::memset(stage_.masks, 0, stage_.pages * sizeof(uint64_t));
  // The first version that reads a page of the stage would otherwise fault
  // on it. Best effort: a fault later is only slower.
  (void)madvise(backing + area->stage_offset, geometry_.bytes, MADV_POPULATE_WRITE);
}

bool StageApplier::Posted() const {
  return area_->stage_state.load() == static_cast<uint32_t>(StageState::kPosted);
}

void StageApplier::NotePost() {
  if (!Posted() || area_->stage_version == noted_version_) return;
  noted_version_ = area_->stage_version;
  const uint64_t posted_ns = area_->stage_posted_ns;
  const std::optional<PostWindow> w = forecast_.Next();
  if (w && posted_ns >= w->wake_ns && posted_ns < w->until_ns) {
    area_->staged_forecast_hits.fetch_add(1, std::memory_order_relaxed);
  }
  forecast_.Posted(posted_ns);
}

void StageApplier::NoteDelivered(uint64_t version, uint64_t now_ns) {
  if (noted_version_ != 0 && version >= noted_version_) forecast_.Delivered(now_ns);
}

bool StageApplier::Current() const {
  return area_->generation == generation_ &&
         area_->state.load() != static_cast<uint32_t>(AreaState::kFree);
}

bool StageApplier::PostedLines(StagedVersion* out) const {
  if (!Current() || !Posted() || Blocked() || claim_.active ||
      area_->stage_kind != static_cast<uint32_t>(StageKind::kLines)) {
    return false;
  }
  out->version = area_->stage_version;
  out->runs = std::span<const LineRun>(stage_.runs, area_->stage_runs);
  out->bytes = stage_.bytes;
  return true;
}

void StageApplier::Claim(uint32_t reader_slot) {
  claim_ = StageClaim{true, area_->stage_version, reader_slot, -1};
}

bool StageApplier::ClaimWritten(int* buffer) const {
  if (!claim_.active || claim_.buffer < 0) return false;
  *buffer = claim_.buffer;
  return true;
}

void StageApplier::ReleaseClaim() {
  if (!claim_.active) return;
  const bool written = claim_.buffer >= 0;
  claim_ = StageClaim{};
  if (!written || !Current()) return;  // unwritten: Apply writes and empties it
  area_->stage_wanted.store(0);
  area_->stage_state.store(static_cast<uint32_t>(StageState::kEmpty));
  WakeStageWaiters(*area_);
}

bool StageApplier::Apply(uint64_t now_ns, ApplyTurn turn) {
  awaiting_pin_ = false;
  if (!Posted()) return false;
  const bool as_masks = area_->stage_kind == static_cast<uint32_t>(StageKind::kMasks);
  // Nobody waits for a version posted as lines until the writer wants the
  // stage back (one posted as masks: the writer waits for it).
  const bool may_wait = !as_masks && !Wanted();
  if (turn.shipping && may_wait && claim_.active && claim_.buffer < 0 &&
      claim_.version == area_->stage_version) {
    return false;
  }
  const uint32_t latest = UnpackLatest(area_->latest.load()).buffer;
  const uint32_t pinned = PinnedBuffers(*area_);
  // With no reader on this host, and no pin on the latest buffer (not even
  // the export's: it drops it once every host holds that version), nothing
  // can read the latest buffer while this turn writes it: the version goes
  // there in place, and no spare has to be kept up with the versions.
  const bool only_daemon = OnlyDaemonReads(*area_);
  const bool in_place =
      latest < area_->buffer_count && (pinned & (1u << latest)) == 0 && only_daemon;
  if (!in_place && only_daemon && may_wait && turn.may_wait_for_pin) {
    awaiting_pin_ = true;
    return false;
  }
  const int target =
      in_place ? static_cast<int>(latest) : PickTargetBuffer(area_->buffer_count, latest, pinned);
  if (target < 0) {
    // Readers pin every spare (or our own export pin does: that one goes at
    // the next turn). The version waits here, counted once as deferred; the
    // writer's next publish says busy rather than wait for readers.
    area_->spare_wanted.store(1);
    if (area_->stage_blocked.exchange(1) == 0) {
      area_->publishes_deferred.fetch_add(1, std::memory_order_relaxed);
      WakeStageWaiters(*area_);
    }
    return false;
  }
  if (as_masks) {
    // Its lines are read from the writer copy: only while the writer waits.
    uint32_t expected = static_cast<uint32_t>(StageState::kPosted);
    if (!area_->stage_state.compare_exchange_strong(expected,
                                                    static_cast<uint32_t>(StageState::kApplying))) {
      return false;  // withdrawn
    }
  }
  const uint64_t version = area_->stage_version;
  const bool claimed = claim_.active && claim_.version == version && !as_masks;
  const std::span<const LineRun> runs(stage_.runs, area_->stage_runs);
  uint8_t* dst = buffers_[target];
  {
    ExportGuard guard(*area_);  // the same protocol as a writer's own publish
    size_t bytes;
    const LineSet* lines;
    const bool log_for_export =
        !claimed && area_->export_pages != 0 && area_->export_enabled.load();
    if (as_masks) {
      masked_.Clear();
      TakeMasks(stage_.masks, stage_.pages, &masked_);
      bytes = publisher_.PublishLines(masked_, static_cast<uint32_t>(target),
                                      backing_ + area_->writer_offset, dst);
      lines = &masked_;
    } else if (in_place) {
      bytes = publisher_.PublishRunsInPlace(runs, stage_.bytes, static_cast<uint32_t>(target), dst);
      masked_.Clear();
      if (log_for_export) masked_.AddRunsInOrder(runs);  // (claimed: the export has them)
      lines = &masked_;
    } else {
      bytes = publisher_.PublishRuns(runs, stage_.bytes, static_cast<uint32_t>(target),
                                     buffers_[latest], dst);
      lines = &publisher_.last_written();
    }
    if (log_for_export) {
      ExportChanges(*area_, reinterpret_cast<uint64_t*>(backing_ + area_->export_offset), *lines,
                    version);
    }
    CompletePublish(*area_, static_cast<uint32_t>(target), version, now_ns, bytes);
    // Before any later version could be written into it.
    if (claimed) SetPin(*area_, claim_.reader_slot, static_cast<uint32_t>(target));
  }
  area_->staged_publishes.fetch_add(1, std::memory_order_relaxed);
  if (in_place) area_->staged_in_place.fetch_add(1, std::memory_order_relaxed);
  if (claimed) {
    // Frames are still read from the stage: the export gives it back.
    claim_.buffer = target;
    area_->stage_state.store(static_cast<uint32_t>(StageState::kHeld));
  } else {
    // The writer may post the next version now (a version posted as masks:
    // it waits for this).
    area_->stage_state.store(static_cast<uint32_t>(StageState::kEmpty));
  }
  WakeStageWaiters(*area_);
  // (In place: the spares lack the whole area. A reader that attaches later
  // makes the next version go to one of them, which then copies it all.)
  catch_up_owed_ = !in_place;
  return true;
}

void StageApplier::CatchUp() {
  if (!catch_up_owed_) return;
  catch_up_owed_ = false;
  // From the buffer just written, whose lines are still in the cache.
  CatchUpNextTarget(*area_, publisher_, buffers_, UnpackLatest(area_->latest.load()).buffer);
}

void StageAppliers::Added(uint32_t index) {
  AreaControl* a = &segment_->areas[index];
  if (a->stage_offset == 0) {
    appliers_.erase(index);
    return;
  }
  appliers_[index] = std::make_shared<StageApplier>(a, backing_);
}

std::shared_ptr<StageApplier> StageAppliers::Find(uint32_t index) const {
  auto it = appliers_.find(index);
  return it == appliers_.end() ? nullptr : it->second;
}

bool StageAppliers::Turn(uint64_t now_ns, ApplyTurn turn) {
  bool applied = false;
  for (auto it = appliers_.begin(); it != appliers_.end();) {
    const AreaControl& a = segment_->areas[it->first];
    if (a.generation != it->second->generation() ||
        a.state.load() == static_cast<uint32_t>(AreaState::kFree)) {
      it = appliers_.erase(it);  // the slot went to another area
      continue;
    }
    it->second->NotePost();
    applied |= it->second->Apply(now_ns, turn);
    ++it;
  }
  return applied;
}

void StageAppliers::CatchUps() {
  for (auto& [index, applier] : appliers_) applier->CatchUp();
}

bool StageAppliers::AnyDue() const {
  for (const auto& [index, applier] : appliers_) {
    if (applier->Posted() && !applier->Blocked() && !applier->AwaitingPin()) return true;
  }
  return false;
}

bool StageAppliers::AnyBlocked() const {
  for (const auto& [index, applier] : appliers_) {
    if (applier->Posted() && applier->Blocked()) return true;
  }
  return false;
}

int64_t StageAppliers::PostPollSleepNs(uint64_t now_ns) {
  int64_t sleep_ns = -1;
  for (auto& [index, applier] : appliers_) {
    const std::optional<PostWindow> w = applier->forecast().Next();
    if (!w) continue;
    if (now_ns >= w->until_ns) {
      applier->forecast().Missed();
      continue;
    }
    if (now_ns >= w->wake_ns) return 0;
    const auto until_wake = static_cast<int64_t>(w->wake_ns - now_ns);
    sleep_ns = sleep_ns < 0 ? until_wake : std::min(sleep_ns, until_wake);
  }
  return sleep_ns;
}

}  // namespace dsm
