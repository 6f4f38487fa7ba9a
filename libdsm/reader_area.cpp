#include "libdsm/reader_area.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "coherence/version_publisher.h"
#include "dsm/dsm.h"
#include "libdsm/errors.h"

namespace dsm {

namespace {
// A writer publishing faster than we can pin makes us retry; give up after this
// many attempts and keep the current version until the next quiescent point.
constexpr int kPinAttempts = 16;
}  // namespace

std::unique_ptr<ReaderArea> ReaderArea::Map(AreaControl* control, uint32_t index, uint32_t slot,
                                            int region_fd) {
  std::unique_ptr<ReaderArea> area(new ReaderArea(control, index, slot, region_fd));
  int rc = DSM_ERR_BUSY;
  for (int round = 0; round < 64 && rc == DSM_ERR_BUSY; ++round) rc = area->MoveToLatest();
  if (rc != DSM_OK) {
    if (rc == DSM_ERR_BUSY) {
      Fail(DSM_ERR_BUSY, "could not pin a version of '{}': the writer replaced every version "
           "before it could be mapped", control->name);
    }
    return nullptr;
  }
  return area;
}

// The owner (Session) gives the address range back to the region reservation.
ReaderArea::~ReaderArea() { control_->reader_pin[slot_].store(kNoPins); }

bool ReaderArea::MapBuffer(uint32_t buffer) {
  // MAP_POPULATE builds the page table in one pass instead of one fault per page.
  void* p = mmap(reinterpret_cast<void*>(control_->addr), control_->mapped_size, PROT_READ,
                 MAP_SHARED | MAP_FIXED | MAP_POPULATE, region_fd_,
                 static_cast<off_t>(control_->buffer_offset[buffer]));
  return p != MAP_FAILED;
}

int ReaderArea::MoveToLatest() {
  for (int attempt = 0; attempt < kPinAttempts; ++attempt) {
    const uint64_t word = control_->latest.load();
    const LatestVersion latest = UnpackLatest(word);
    if (buffer_ != kNoBuffer && latest.version <= version_) return DSM_OK;
    // Pin the candidate next to the current buffer, then confirm it is still the
    // latest: a writer that chose it as a target before seeing our pin has since
    // replaced `latest`, so the re-check fails and we try again.
    control_->reader_pin[slot_].store(PinWord(buffer_, latest.buffer));
    if (control_->latest.load() != word) continue;
    if (!MapBuffer(latest.buffer)) {
      const int err = errno;
      if (buffer_ != kNoBuffer) MapBuffer(buffer_);
      control_->reader_pin[slot_].store(PinWord(buffer_, kNoBuffer));
      return Fail(DSM_ERR_SYSTEM, "cannot map version {} of '{}': {}", latest.version,
                  control_->name, strerror(err));
    }
    buffer_ = latest.buffer;
    version_ = latest.version;
    control_->reader_pin[slot_].store(PinWord(buffer_, kNoBuffer));
    return DSM_OK;
  }
  control_->reader_pin[slot_].store(PinWord(buffer_, kNoBuffer));
  return DSM_ERR_BUSY;
}

}  // namespace dsm
