// This host's areas, shipped to the hosts that replicate them: dsmd's side of
// AreaExport (coherence/area_export.h), which decides what to send when.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/remote_sync.h"
#include "daemon/tunables.h"
#include "libdsm/contract/region_limits.h"

namespace dsm {

void RemoteSync::OnSubscribe(const wire::Frame& f, uint16_t host, uint64_t now_ns) {
  const uint32_t index = f.header.area_index;
  if (index >= kMaxAreas) {
    Drop(wire::DropReason::kUnknownArea);
    return;
  }
  AreaControl& a = segment_->areas[index];
  const bool live = a.state.load() != static_cast<uint32_t>(AreaState::kFree) && !a.is_replica;
  if (!live || a.generation != f.header.area_generation) {
    spdlog::debug("host {} subscribes to area {} generation {}: not ours (state {}, generation {})",
                  host, index, f.header.area_generation, a.state.load(), a.generation);
    Drop(wire::DropReason::kUnknownArea);
    return;
  }
  auto it = exports_.find(index);
  if (f.header.flags & wire::kFlagUnsubscribe) {
    if (it != exports_.end()) it->second.area->Unsubscribe(host);
    return;
  }
  if (it == exports_.end() || it->second.generation != a.generation) {
    ExportedArea e;
    e.index = index;
    e.generation = a.generation;
    const auto slot = directory_->ReserveDaemonSlot(index);
    if (!slot) {
      spdlog::warn("cannot export '{}': no free reader slot", a.name);
      return;
    }
    e.reader_slot = *slot;
    e.host = std::make_unique<ShmExportHost>(&a, backing_, e.reader_slot, transport_.get(), &seal_,
                                             kClusterGroup, params_.export_wait_ns);
    if (stages_ != nullptr) e.host->set_stage(stages_->Find(index));
    wire::Header h = MakeHeader(wire::FrameType::kData);
    h.area_index = index;
    h.area_generation = a.generation;
    // Without multicast a frame reaches one host: one host per transfer.
    e.area = std::make_unique<AreaExport>(a.size, a.mapped_size, cluster_.multicast, h, params_,
                                          e.host.get(), e.host.get(), &export_counters_);
    if (a.managed_budget_bytes_per_s != 0) {
      ManagedExport managed;
      managed.selection.max_line_age = a.managed_max_line_age;
      managed.selection.rank = a.managed_element == DSM_ELEMENT_FLOAT32_ABSOLUTE
                                   ? ManagedRank::kAbsolute
                                   : ManagedRank::kRelative;
      managed.bytes_per_second = a.managed_budget_bytes_per_s;
      // Bursts of managed_burst_ns' worth, and at least a frame's.
      const double burst = static_cast<double>(a.managed_budget_bytes_per_s) *
                           static_cast<double>(params_.managed_burst_ns) / 1e9;
      managed.burst_bytes =
          std::max<uint64_t>(static_cast<uint64_t>(burst), transport_->max_payload_bytes());
      e.area->SetManaged(managed, now_ns);
    }
    e.marks = timeline_.ForArea(config_.host_id, index, a.generation);
    e.area->set_stage_marks(e.marks.get());
    a.export_enabled.store(1);  // from now on the writer logs each version's lines
    exports_.erase(index);
    it = exports_.emplace(index, std::move(e)).first;
    spdlog::info("exporting '{}' to host {}", a.name, host);
  }
  it->second.area->Subscribe(host);
}

void RemoteSync::ReleasePins() {
  for (auto& [index, e] : exports_) {
    if (!ExportLive(e)) e.area->AreaFreed();
    e.area->ReleasePin();
  }
}

void RemoteSync::DropTailsOfFreedExports() {
  // The freed area's pages went back to the host (or to another area):
  // a queued frame would send whatever they hold now.
  for (auto& [index, e] : exports_) {
    if (ExportLive(e)) continue;
    if (const size_t n = e.host->DropTails(); n > 0) {
      spdlog::debug("area {} was freed: dropped {} queued frames that read its lines", e.index, n);
    }
  }
}

bool RemoteSync::ExportLive(const ExportedArea& e) const {
  const AreaControl& a = segment_->areas[e.index];
  const auto state = static_cast<AreaState>(a.state.load());
  return a.generation == e.generation && (state == AreaState::kLive || state == AreaState::kSealed);
}

bool RemoteSync::AnyExportLive() const {
  for (const auto& [index, e] : exports_) {
    if (ExportLive(e)) return true;
  }
  return false;
}

bool RemoteSync::ExportTurn(ExportedArea& e, uint64_t now_ns) {
  if (!ExportLive(e)) {
    e.area->AreaFreed();  // nobody to send to any more; its pins went with it
    return false;
  }
  // For a writer freeing the area: how far every subscribed host has come.
  segment_->areas[e.index].remote_acked_version.store(e.area->MinAcked(),
                                                      std::memory_order_relaxed);
  return e.area->Turn(now_ns);
}

bool RemoteSync::ExportDue(uint64_t now_ns) const {
  for (const auto& [index, e] : exports_) {
    if (ExportLive(e) && e.area->Due(now_ns)) return true;
  }
  return false;
}

void RemoteSync::OnAck(const wire::Frame& f, uint16_t host, uint64_t now_ns) {
  ++stats_.acks_in;
  auto it = exports_.find(f.header.area_index);
  if (it == exports_.end() || it->second.generation != f.header.area_generation) {
    Drop(wire::DropReason::kUnknownArea);
    return;
  }
  ExportedArea& e = it->second;
  if (!ExportLive(e)) return;  // freed: its buffers are gone
  // The missing frames, as the receiver listed them (unaligned in the frame).
  wire::SeqRange missing[wire::kMaxMissingRanges];
  const size_t ranges = std::min(f.body.size() / sizeof(wire::SeqRange), wire::kMaxMissingRanges);
  std::memcpy(missing, f.body.data(), ranges * sizeof(wire::SeqRange));
  e.area->OnAck(host, f.header.version, (f.header.flags & wire::kFlagFull) != 0,
                f.header.base_version, f.header.transfer_id,
                std::span<const wire::SeqRange>(missing, ranges), now_ns);
  // A writer that waits for its readers posts a steady time after this.
  if (StageApplier* stage = e.host->stage()) stage->NoteDelivered(e.area->MinAcked(), now_ns);
}

}  // namespace dsm
