#include "daemon/import_host.h"

#include <utility>

#include "coherence/version_publisher.h"
#include "libdsm/contract/publish_protocol.h"

namespace dsm {

ShmImportHost::ShmImportHost(AreaDirectory* directory, uint32_t index, AreaControl* area,
                             uint8_t* backing, std::function<void(const AckReport&)> send_ack)
    : directory_(directory),
      index_(index),
      area_(*area),
      backing_(backing),
      send_ack_(std::move(send_ack)) {}

int ShmImportHost::ForWriting(int buffer) {
  // A reader pins the latest buffer (PinLatest re-checks `latest`), or one
  // that holds an exact version when an in-place write kept it waiting too
  // long (PinExactOther, which MarkForWriting's order excludes); so a buffer
  // marked unpinned here stays unpinned until we make it the latest.
  if (buffer < 0 || MarkForWriting(area_, static_cast<uint32_t>(buffer))) return buffer;
  return -1;
}

int ShmImportHost::SpareForNextVersion() {
  return ForWriting(PickTargetBuffer(area_.buffer_count, Latest(), PinnedBuffers(area_)));
}

int ShmImportHost::SpareToPublish() { return ForWriting(ChoosePublishTarget(area_)); }

int ShmImportHost::SpareBesides(int buffer) {
  const uint32_t taken = buffer >= 0 ? 1u << buffer : 0;
  return ForWriting(PickTargetBuffer(area_.buffer_count, Latest(), PinnedBuffers(area_) | taken));
}

bool ShmImportHost::BeginInPlace() {
  in_place_ = TakeLatestInPlace(area_);
  return in_place_ >= 0;
}

void ShmImportHost::EndInPlace(uint64_t version, size_t bytes_copied, uint64_t now_ns) {
  if (in_place_ < 0) return;
  ::dsm::EndInPlace(area_, static_cast<uint32_t>(in_place_), version, now_ns, bytes_copied);
  in_place_ = -1;
  if (!named_ && current_) named_ = directory_->NameReplica(index_);
}

uint32_t ShmImportHost::Latest() { return UnpackLatest(area_.latest.load()).buffer; }

uint8_t* ShmImportHost::Buffer(int buffer) {
  return backing_ + (buffer >= 0 ? area_.buffer_offset[buffer] : area_.writer_offset);
}

void ShmImportHost::Publish(uint32_t buffer, uint64_t version, size_t bytes_copied,
                            uint64_t now_ns) {
  CompletePublish(area_, buffer, version, now_ns, bytes_copied);
  if (!named_ && current_) named_ = directory_->NameReplica(index_);
}

void ShmImportHost::SetCurrent(bool current) {
  current_ = current;
  if (!current && named_) {
    directory_->UnnameReplica(index_);
    named_ = false;
  }
  // A name freed by another replica: this one takes it once it has a version.
  if (current && !named_ && UnpackLatest(area_.latest.load()).version != 0) {
    named_ = directory_->NameReplica(index_);
  }
}

void ShmImportHost::CaughtUp(size_t bytes) {
  area_.bytes_published.fetch_add(bytes, std::memory_order_relaxed);
  area_.bytes_caught_up.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace dsm
