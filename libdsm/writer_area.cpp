#include "libdsm/writer_area.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "dsm/dsm.h"
#include "libdsm/errors.h"

namespace dsm {

WriterArea::WriterArea(AreaControl* control, uint32_t index)
    : control_(control),
      index_(index),
      log_(control->size),
      publisher_(control->size, control->buffer_count) {}

std::unique_ptr<WriterArea> WriterArea::Map(AreaControl* control, uint32_t index, int region_fd) {
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
  return area;
}

WriterArea::~WriterArea() {
  for (uint8_t* b : buffers_) {
    if (b) munmap(b, control_->mapped_size);
  }
}

int WriterArea::Publish(uint64_t now_ns) {
  next_sync_ns_ = now_ns + control_->sync_interval_ns;
  if (log_.Empty()) {
    // Nothing changed: what readers have is the writer's state as of now.
    control_->confirmed_ns.store(now_ns);
    return DSM_OK;
  }
  const LatestVersion latest = UnpackLatest(control_->latest.load());
  uint32_t pinned = 0;
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    const uint32_t pins = control_->reader_pin[s].load();
    for (uint32_t b : {pins & 0xff, (pins >> 8) & 0xff}) {
      if (b < kMaxReaderBuffers) pinned |= 1u << b;
    }
  }
  const int target = PickTargetBuffer(control_->buffer_count, latest.buffer, pinned);
  if (target < 0) {
    control_->publishes_deferred.fetch_add(1, std::memory_order_relaxed);
    return Fail(DSM_ERR_BUSY, "'{}': local readers still hold every spare buffer; the changes "
                "stay logged for the next publish", control_->name);
  }
  const auto* src = reinterpret_cast<const uint8_t*>(control_->addr);
  const size_t bytes = publisher_.Publish(log_, static_cast<uint32_t>(target), src, buffers_[target]);
  version_ = latest.version + 1;
  control_->buffer_version[target].store(version_);
  control_->buffer_published_ns[target].store(now_ns);
  control_->latest.store(PackLatest(version_, static_cast<uint32_t>(target)));
  control_->confirmed_ns.store(now_ns);
  control_->publishes.fetch_add(1, std::memory_order_relaxed);
  control_->bytes_published.fetch_add(bytes, std::memory_order_relaxed);
  return DSM_OK;
}

}  // namespace dsm
