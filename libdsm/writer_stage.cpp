#include "libdsm/writer_stage.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "dsm/dsm.h"
#include "libdsm/contract/clock.h"
#include "libdsm/contract/publish_protocol.h"
#include "libdsm/errors.h"

namespace dsm {

namespace {

// How long one sleep on the stage lasts before dsmd's liveness is checked again.
constexpr uint64_t kStageCheckNs = 1'000'000;

}  // namespace

std::unique_ptr<WriterStage> WriterStage::Map(AreaControl* control, int region_fd, DaemonLink link,
                                              bool* failed) {
  *failed = false;
  // Without a way to wake dsmd and to see it gone, the writer publishes itself.
  if (control->stage_offset == 0 || !link.ring_doorbell || !link.daemon_alive) return nullptr;
  void* p = mmap(nullptr, control->stage_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd,
                 static_cast<off_t>(control->stage_offset));
  if (p == MAP_FAILED) {
    *failed = true;
    Fail(DSM_ERR_SYSTEM, "cannot map the stage of '{}': {}", control->name, strerror(errno));
    return nullptr;
  }
  // Populated now: the first publish that gathers into a page would
  // otherwise fault on it (publish_bench, the first 1% gather of a 64 MiB
  // area after whole-area versions: 2.7-4.2 ms, 1.2-1.8 ms populated).
  // Best effort: a fault later is only slower.
  (void)madvise(p, control->stage_bytes, MADV_POPULATE_WRITE);
  return std::unique_ptr<WriterStage>(
      new WriterStage(control, static_cast<uint8_t*>(p), std::move(link)));
}

WriterStage::WriterStage(AreaControl* control, uint8_t* base, DaemonLink link)
    : control_(control),
      base_(base),
      geometry_(StageGeometryFor(control->size, 1)),
      memory_(StageMemoryAt(base, geometry_)),
      link_(std::move(link)) {}

WriterStage::~WriterStage() { munmap(base_, control_->stage_bytes); }

bool WriterStage::Drained() const {
  const StageState s = state();
  return s == StageState::kEmpty || s == StageState::kHeld;  // held: written already
}

int WriterStage::WaitFree(uint64_t timeout_ns) {
  const uint64_t deadline = MonotonicNs() + timeout_ns;
  for (;;) {
    const StageState s = state();
    if (s == StageState::kEmpty || s == StageState::kCancelled) return DSM_OK;
    if (s == StageState::kPosted && control_->stage_blocked.load() != 0) {
      return Fail(DSM_ERR_BUSY,
                  "'{}': local readers still hold every spare buffer, so version "
                  "{} waits in the stage; the new changes stay logged for the next publish",
                  control_->name, control_->stage_version);
    }
    if (!link_.daemon_alive()) {
      return Fail(DSM_ERR_DAEMON_GONE, "'{}': dsmd is gone", control_->name);
    }
    const uint64_t now = MonotonicNs();
    if (now >= deadline) {
      return Fail(DSM_ERR_BUSY,
                  "'{}': dsmd has not taken version {} within {} ms; the new "
                  "changes stay logged for the next publish",
                  control_->name, control_->stage_version, timeout_ns / 1'000'000);
    }
    // dsmd writes a posted version into a buffer once its frames for other
    // hosts are out, and lets go of a held one (written already), at once
    // when asked.
    if (s == StageState::kHeld || s == StageState::kPosted) control_->stage_wanted.store(1);
    link_.ring_doorbell();
    WaitStageChange(*control_, static_cast<uint32_t>(s), std::min(kStageCheckNs, deadline - now));
  }
}

int WriterStage::Post(ChangeLog& log, const uint8_t* src, uint64_t version, uint64_t timeout_ns) {
  // Masks of a withdrawn version are still in the stage: this one joins them.
  const bool withdrawn = state() == StageState::kCancelled;
  const StagedCounts c = StageChanges(log, src, memory_, withdrawn);
  control_->stage_kind = static_cast<uint32_t>(c.as_masks ? StageKind::kMasks : StageKind::kLines);
  control_->stage_version = version;
  control_->stage_runs = c.runs;
  control_->stage_lines = c.lines;
  control_->stage_posted_ns = MonotonicNs();  // dsmd forecasts the next post from these
  control_->stage_blocked.store(0);
  control_->stage_wanted.store(0);  // this version is not waited for yet
  // No futex wake: only a publish waits on the stage, and publishes of an
  // area take turns (the session's lock), so nobody can be waiting now.
  control_->stage_state.store(static_cast<uint32_t>(StageState::kPosted));
  link_.ring_doorbell();
  return c.as_masks ? AwaitMasks(timeout_ns) : DSM_OK;
}

int WriterStage::AwaitMasks(uint64_t timeout_ns) {
  // dsmd reads these lines from the writer copy: nothing may change them
  // until it is done, so this publish lasts until then, or until the
  // version is withdrawn before dsmd began.
  const uint64_t deadline = MonotonicNs() + timeout_ns;
  for (;;) {
    const StageState s = state();
    if (s == StageState::kEmpty) return DSM_OK;
    const bool alive = link_.daemon_alive();
    const uint64_t now = MonotonicNs();
    const bool give_up = !alive || now >= deadline || control_->stage_blocked.load() != 0;
    if (s == StageState::kPosted && give_up) {
      uint32_t expected = static_cast<uint32_t>(StageState::kPosted);
      if (control_->stage_state.compare_exchange_strong(
              expected, static_cast<uint32_t>(StageState::kCancelled))) {
        if (!alive) return Fail(DSM_ERR_DAEMON_GONE, "'{}': dsmd is gone", control_->name);
        return Fail(DSM_ERR_BUSY,
                    "'{}': dsmd could not write version {} into a reader buffer "
                    "within {} ms (local readers may hold every spare); its changes stay for "
                    "the next publish",
                    control_->name, control_->stage_version, timeout_ns / 1'000'000);
      }
      continue;  // dsmd began copying just now
    }
    if (s == StageState::kApplying && !alive) {
      // dsmd died while copying: nothing of the version is visible, and the
      // writer that takes the buffers back copies everything anyway.
      return Fail(DSM_ERR_DAEMON_GONE, "'{}': dsmd is gone", control_->name);
    }
    link_.ring_doorbell();
    WaitStageChange(*control_, static_cast<uint32_t>(s), kStageCheckNs);
  }
}

}  // namespace dsm
