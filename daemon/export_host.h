// The host side of AreaExport in dsmd: a local area's control block and
// buffers in the host's shared memory, dsmd's reader slot on it, the
// writer's export logs, and the transport its frames go out on.
#ifndef DSM_DAEMON_EXPORT_HOST_H_
#define DSM_DAEMON_EXPORT_HOST_H_

#include <cstdint>
#include <memory>

#include "coherence/area_export.h"
#include "daemon/export_log_reader.h"
#include "daemon/stage_applier.h"
#include "libdsm/contract/shm_layout.h"
#include "net/transport.h"

namespace dsm {

class ShmExportHost : public ExportHost, public ExportFrameOut {
 public:
  // `backing`: the host's backing memory; `reader_slot`: the slot dsmd pins
  // the shipped version in; `group`: where frames to every host go.
  ShmExportHost(AreaControl* area, uint8_t* backing, uint32_t reader_slot,
                net::Transport* transport, wire::FrameSeal* seal, uint16_t group,
                uint64_t export_wait_ns);

  // ExportHost.
  uint64_t LatestVersion() override;
  bool TakeChanges(LineSet* into, uint64_t* taken_version) override;
  void AddUntakenChanges(LineSet* into) override;
  bool PinLatest(int held, int* buffer, uint64_t* version) override;
  void SetPin(int buffer) override;
  const uint8_t* Buffer(int buffer) override;
  bool WriterWantsBuffer(int pinned) override;
  bool TakeBufferRequest() override;
  void ClearBufferRequest() override;
  bool TailsInUse() override;
  bool PostedStage(StagedVersion* out) override { return stage_ && stage_->PostedLines(out); }
  void ClaimStage() override { stage_->Claim(reader_slot_); }
  bool ClaimedStageWritten(int* buffer) override { return stage_ && stage_->ClaimWritten(buffer); }
  void ReleaseStage() override {
    if (stage_) stage_->ReleaseClaim();
  }
  bool StageWanted() override { return stage_ && stage_->Wanted(); }
  void ManagedResidual(uint64_t version, uint64_t lines, uint64_t oldest_lag) override {
    area_.managed_residual_lines.store(lines, std::memory_order_relaxed);
    area_.managed_oldest_lag.store(oldest_lag, std::memory_order_relaxed);
    area_.managed_residual_version.store(version, std::memory_order_release);
  }

  // The area's stage, if its writer hands versions over there.
  void set_stage(std::shared_ptr<StageApplier> stage) { stage_ = std::move(stage); }
  StageApplier* stage() const { return stage_.get(); }
  ~ShmExportHost() override;

  // ExportFrameOut.
  size_t max_frame_bytes() override { return transport_->max_payload_bytes(); }
  wire::FrameSeal* seal() override { return seal_; }
  size_t backlog() override { return transport_->tx_backlog(); }
  uint8_t* Reserve(uint16_t dest, bool urgent) override;
  void Commit(size_t bytes) override { transport_->Commit(bytes); }
  void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                      bool in_place) override {
    transport_->CommitWithTail(reserved, head_bytes, tail, in_place ? tails_.get() : nullptr);
  }

  // The area was freed (its memory goes back to the host): drops the queued
  // frames that still read its lines. Returns how many.
  size_t DropTails();

 private:
  AreaControl& area_;
  uint8_t* backing_;
  uint32_t reader_slot_;
  net::Transport* transport_;
  wire::FrameSeal* seal_;
  uint16_t group_;
  uint64_t export_wait_ns_;
  ExportLogReader logs_;
  // Frames sent with their lines read in place from the pinned buffer
  // (nullptr where the device cannot).
  std::unique_ptr<net::TailHold> tails_;
  std::shared_ptr<StageApplier> stage_;
};

}  // namespace dsm

#endif  // DSM_DAEMON_EXPORT_HOST_H_
