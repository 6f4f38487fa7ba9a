#include "libdsm/writer_area.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "coherence/line_diff.h"
#include "dsm/dsm.h"
#include "libdsm/contract/publish_protocol.h"
#include "libdsm/errors.h"
#include "libdsm/log_cache.h"

namespace dsm {

std::vector<WriterArea::ThreadLogSlot> WriterArea::FirstThreadLog(size_t area_bytes) {
  std::vector<ThreadLogSlot> slots;
  slots.push_back({{}, std::make_unique<ChangeLog>(area_bytes)});
  return slots;
}

WriterArea::WriterArea(AreaControl* control, uint32_t index)
    : control_(control),
      index_(index),
      thread_logs_(FirstThreadLog(control->size)),
      log_(*thread_logs_.front().log),
      publisher_(control->size, control->buffer_count),
      changed_(control->size) {}

std::unique_ptr<WriterArea> WriterArea::Map(AreaControl* control, uint32_t index, int region_fd,
                                            uint32_t tracking, uint32_t page_tracker,
                                            size_t page_bytes, DaemonLink link) {
  std::unique_ptr<WriterArea> area(new WriterArea(control, index));
  void* w = mmap(reinterpret_cast<void*>(control->addr), control->mapped_size,
                 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, region_fd,
                 static_cast<off_t>(control->writer_offset));
  if (w == MAP_FAILED) {
    Fail(DSM_ERR_SYSTEM, "cannot map the writer copy of '{}': {}", control->name, strerror(errno));
    return nullptr;
  }
  for (uint32_t b = 0; b < control->buffer_count; ++b) {
    void* p = mmap(nullptr, control->mapped_size, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd,
                   static_cast<off_t>(control->buffer_offset[b]));
    if (p == MAP_FAILED) {
      Fail(DSM_ERR_SYSTEM, "cannot map reader buffer {} of '{}': {}", b, control->name,
           strerror(errno));
      return nullptr;
    }
    area->buffers_[b] = static_cast<uint8_t*>(p);
  }
  if (control->export_pages != 0) {
    void* logs = mmap(nullptr, control->export_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                      region_fd, static_cast<off_t>(control->export_offset));
    if (logs == MAP_FAILED) {
      Fail(DSM_ERR_SYSTEM, "cannot map the export log of '{}': {}", control->name, strerror(errno));
      return nullptr;
    }
    area->export_logs_ = static_cast<uint64_t*>(logs);
  }
  if (tracking == DSM_TRACK_LOG) {
    bool failed = false;
    area->stage_ = WriterStage::Map(control, region_fd, std::move(link), &failed);
    if (failed) return nullptr;
  }
  if (tracking != DSM_TRACK_LOG) {
    if (PageTracker::Start(static_cast<int>(page_tracker), w, control->mapped_size, page_bytes,
                           &area->tracker_) != DSM_OK) {
      Fail(DSM_ERR_SYSTEM, "'{}': {}", control->name, LastError());
      return nullptr;
    }
    control->page_tracker.store(area->tracker_->kind());
  }
  control->tracking.store(tracking);
  return area;
}

WriterArea::~WriterArea() {
  for (uint8_t* b : buffers_) {
    if (b) munmap(b, control_->mapped_size);
  }
  if (export_logs_) munmap(export_logs_, control_->export_bytes);
}

void WriterArea::LogWrittenLines() {
  const auto* current = reinterpret_cast<const uint8_t*>(control_->addr);
  const uint8_t* published = buffers_[UnpackLatest(control_->latest.load()).buffer];
  uint64_t pages = 0;
  uint64_t lines = 0;
  const int rc = tracker_->Collect([&](size_t offset, size_t bytes) {
    pages += (bytes + kPageBytes - 1) / kPageBytes;
    lines += MarkChangedLines(current, published, offset, bytes, &log_);
  });
  if (rc != DSM_OK) {
    // The tracker lost track: diff the whole area rather than miss a store.
    lines = MarkChangedLines(current, published, 0, control_->size, &log_);
    pages = control_->mapped_size / kPageBytes;
  }
  control_->pages_written.fetch_add(pages, std::memory_order_relaxed);
  control_->lines_changed.fetch_add(lines, std::memory_order_relaxed);
}

ChangeLog& WriterArea::ThreadLog() {
  const std::weak_ptr<const void> me = ThisThreadToken();
  ThreadLogSlot* free_slot = nullptr;
  for (ThreadLogSlot& slot : thread_logs_) {
    // Owner comparison, not the pointers: an expired token still compares.
    if (!slot.owner.owner_before(me) && !me.owner_before(slot.owner)) return *slot.log;
    if (!free_slot && slot.owner.expired()) free_slot = &slot;
  }
  if (!free_slot) {
    thread_logs_.push_back({{}, std::make_unique<ChangeLog>(control_->size)});
    free_slot = &thread_logs_.back();
  }
  free_slot->owner = me;
  return *free_slot->log;
}

void WriterArea::GatherThreadLogs() {
  for (size_t i = 1; i < thread_logs_.size(); ++i) log_.Absorb(*thread_logs_[i].log);
}

int WriterArea::Publish(uint64_t now_ns) {
  next_sync_ns_ = now_ns + control_->sync_interval_ns;
  GatherThreadLogs();
  if (stage_) {
    const int rc = PublishStaged(now_ns);
    if (rc != DSM_ERR_DAEMON_GONE) return rc;
    TakeOverBuffers();
  }
  if (tracker_) LogWrittenLines();
  NoteChanges(now_ns);
  if (log_.Empty() && !ManagedTopUpDue(now_ns)) {
    // Nothing changed: what readers have is the writer's state as of now.
    control_->confirmed_ns.store(now_ns);
    return DSM_OK;
  }
  const int target = ChoosePublishTarget(*control_);
  if (target < 0) {
    return Fail(DSM_ERR_BUSY, "'{}': local readers still hold every spare buffer; the changes "
                "stay logged for the next publish", control_->name);
  }
  const auto* src = reinterpret_cast<const uint8_t*>(control_->addr);
  {
    // The whole publish is inside the export critical section (export_seq odd):
    // once dsmd sees it even, every version logged is also complete, and a
    // publish that began before dsmd enabled export has finished
    // (docs/region-layout.md).
    ExportGuard guard(*control_);
    const bool exporting = export_logs_ && control_->export_enabled.load();
    const size_t bytes = publisher_.Publish(log_, static_cast<uint32_t>(target), src,
                                            buffers_[target], exporting ? &changed_ : nullptr);
    // Past every version handed to dsmd too (TakeOverBuffers).
    version_ = std::max(version_, UnpackLatest(control_->latest.load()).version) + 1;
    if (exporting) {
      ExportChanges(*control_, export_logs_, changed_, version_);
      changed_.Clear();
    }
    CompletePublish(*control_, static_cast<uint32_t>(target), version_, now_ns, bytes);
  }
  CatchUpNextTarget(*control_, publisher_, buffers_, static_cast<uint32_t>(target));
  return DSM_OK;
}

int WriterArea::PublishStaged(uint64_t now_ns) {
  NoteChanges(now_ns);
  if (log_.Empty() && !stage_->Withdrawn() && !ManagedTopUpDue(now_ns)) {
    // Nothing changed: once dsmd has written the last version, what readers
    // have is the writer's state as of now.
    if (stage_->Drained()) control_->confirmed_ns.store(now_ns);
    return DSM_OK;
  }
  if (const int rc = stage_->WaitFree(kStageWaitNs); rc != DSM_OK) return rc;
  const uint64_t version = std::max(version_, UnpackLatest(control_->latest.load()).version) + 1;
  const int rc =
      stage_->Post(log_, reinterpret_cast<const uint8_t*>(control_->addr), version, kStageWaitNs);
  // A withdrawn version (busy) stays in the stage; it is published as part of
  // the next one, under the next number.
  if (rc == DSM_OK) version_ = version;
  return rc;
}

namespace {

// A writer has stopped changing a managed area once it published no change
// for this many of its gaps between changes, and at least this many sync
// intervals: a training loop's waits between steps do not count.
constexpr uint64_t kManagedIdleGaps = 2;
constexpr uint64_t kManagedIdleIntervals = 4;

}  // namespace

void WriterArea::NoteChanges(uint64_t now_ns) {
  if (log_.Empty() || now_ns == last_change_ns_) return;
  if (last_change_ns_ != 0) change_gap_ns_ = now_ns - last_change_ns_;
  last_change_ns_ = now_ns;
}

bool WriterArea::ManagedTopUpDue(uint64_t now_ns) const {
  if (control_->managed_budget_bytes_per_s == 0 ||
      control_->managed_residual_lines.load(std::memory_order_relaxed) == 0) {
    return false;
  }
  if (flushing_) return true;
  const uint64_t idle = std::max(kManagedIdleGaps * change_gap_ns_,
                                 kManagedIdleIntervals * control_->sync_interval_ns);
  return now_ns - last_change_ns_ >= idle;
}

bool WriterArea::ManagedSentWhole() const {
  if (control_->managed_budget_bytes_per_s == 0 || control_->export_enabled.load() == 0) {
    return true;
  }
  return control_->managed_residual_version.load(std::memory_order_acquire) >= version_ &&
         control_->managed_residual_lines.load(std::memory_order_relaxed) == 0;
}

int WriterArea::PublishWaitingLines(uint64_t now_ns) {
  flushing_ = true;
  const int rc = Publish(now_ns);
  flushing_ = false;
  return rc;
}

void WriterArea::TakeOverBuffers() {
  // dsmd may have stopped anywhere in a version, and what each buffer lacks
  // went with it: the next publish into each buffer copies the whole area.
  // The writer copy holds every change, those still in the stage included.
  stage_.reset();
  publisher_.MarkAllPending();
}

}  // namespace dsm
