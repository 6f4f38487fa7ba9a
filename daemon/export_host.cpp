#include "daemon/export_host.h"

#include "libdsm/contract/publish_protocol.h"

namespace dsm {

namespace {

uint32_t ToSlotBuffer(int buffer) { return buffer < 0 ? kNoBuffer : static_cast<uint32_t>(buffer); }

}  // namespace

ShmExportHost::ShmExportHost(AreaControl* area, uint8_t* backing, uint32_t reader_slot,
                             net::Transport* transport, wire::FrameSeal* seal, uint16_t group,
                             uint64_t export_wait_ns)
    : area_(*area),
      backing_(backing),
      reader_slot_(reader_slot),
      transport_(transport),
      seal_(seal),
      group_(group),
      export_wait_ns_(export_wait_ns),
      logs_(area, reinterpret_cast<std::atomic<uint64_t>*>(backing + area->export_offset)),
      tails_(transport->NewTailHold()) {}

ShmExportHost::~ShmExportHost() {
  // A claimed stage left behind would keep the writer waiting.
  if (stage_) stage_->ReleaseClaim();
}

uint64_t ShmExportHost::LatestVersion() { return UnpackLatest(area_.latest.load()).version; }

bool ShmExportHost::TakeChanges(LineSet* into, uint64_t* taken_version) {
  const bool taken = logs_.Take(into, export_wait_ns_);
  *taken_version = logs_.taken_version();
  return taken;
}

void ShmExportHost::AddUntakenChanges(LineSet* into) { logs_.AddCurrent(into); }

bool ShmExportHost::PinLatest(int held, int* buffer, uint64_t* version) {
  dsm::LatestVersion pinned{};
  if (!dsm::PinLatest(area_, reader_slot_, ToSlotBuffer(held), &pinned)) return false;
  *buffer = static_cast<int>(pinned.buffer);
  *version = pinned.version;
  return true;
}

void ShmExportHost::SetPin(int buffer) { dsm::SetPin(area_, reader_slot_, ToSlotBuffer(buffer)); }

const uint8_t* ShmExportHost::Buffer(int buffer) {
  return backing_ + area_.buffer_offset[buffer];
}

bool ShmExportHost::WriterWantsBuffer(int pinned) {
  // Our pin keeps the writer out only if it is not on the latest buffer (the
  // writer never publishes into that one anyway).
  return pinned >= 0 && area_.spare_wanted.load() != 0 &&
         UnpackLatest(area_.latest.load()).buffer != static_cast<uint32_t>(pinned);
}

bool ShmExportHost::TakeBufferRequest() { return area_.spare_wanted.exchange(0) != 0; }

void ShmExportHost::ClearBufferRequest() { area_.spare_wanted.store(0); }

bool ShmExportHost::TailsInUse() {
  if (tails_ == nullptr || tails_->frames_in_use() == 0) return false;
  transport_->Flush();
  return tails_->frames_in_use() != 0;
}

uint8_t* ShmExportHost::Reserve(uint16_t dest, bool urgent) {
  net::Destination d =
      dest == wire::kAllHosts ? net::Destination::Group(group_) : net::Destination::Host(dest);
  d.urgent = urgent;
  return transport_->Reserve(d);
}

size_t ShmExportHost::DropTails() {
  if (tails_ == nullptr || tails_->frames_in_use() == 0) return 0;
  return transport_->DropTails(tails_.get());
}

}  // namespace dsm
