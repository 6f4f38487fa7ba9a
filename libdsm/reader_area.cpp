#include "libdsm/reader_area.h"

#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "coherence/version_publisher.h"
#include "dsm/dsm.h"
#include "libdsm/contract/clock.h"
#include "libdsm/contract/publish_protocol.h"
#include "libdsm/errors.h"

namespace dsm {

namespace {

// A reader waits for dsmd's in-place write of the buffer it maps (normally
// well under a millisecond), looking every kInPlaceWaitNs whether dsmd is
// still there; once it is gone, or after kInPlaceGiveUpNs (dsmd stopped),
// it moves to an older whole version rather than wait on.
constexpr uint64_t kInPlaceWaitNs = 10'000'000;
constexpr uint64_t kInPlaceGiveUpNs = 5'000'000'000;

// The replicas this process reads (their pins yield together).
std::mutex g_replicas_mu;
std::vector<ReaderArea*>& Replicas() {
  static auto* v = new std::vector<ReaderArea*>();
  return *v;
}

}  // namespace

void ReaderArea::YieldReplicas() {
  std::lock_guard lock(g_replicas_mu);
  for (ReaderArea* r : Replicas()) YieldPin(*r->control_, r->slot_);
}

void ReaderArea::ReclaimReplicas() {
  std::lock_guard lock(g_replicas_mu);
  for (ReaderArea* r : Replicas()) r->Reclaim();
}

bool ReaderArea::DaemonGone() const {
  return daemon_->daemon_alive.load() == 0 || (kill(daemon_->daemon_pid, 0) != 0 && errno == ESRCH);
}

void ReaderArea::Reclaim() {
  if (buffer_ == kNoBuffer) return;
  const uint64_t give_up = MonotonicNs() + kInPlaceGiveUpNs;
  for (;;) {
    if (ReclaimPin(*control_, slot_, kInPlaceWaitNs)) {
      // dsmd may have written a newer version into it meanwhile (it stores
      // which before it gives the pin back).
      version_ = control_->buffer_version[buffer_].load();
      return;
    }
    if (!DaemonGone() && MonotonicNs() < give_up) continue;
    // dsmd died (or stays stopped) in the middle of that write: an older
    // version that is whole rather than wait on.
    LatestVersion other{};
    if (PinExactOther(*control_, slot_, buffer_, &other)) {
      if (Switch(other.buffer)) {
        buffer_ = other.buffer;
        version_ = other.version;
      } else {
        MapNothing();
      }
      return;
    }
    // (Still taken and nothing whole to move to: dsmd gave its pin back just
    // now and the next try takes it, or there is none and it never will.)
    const uint32_t pin = control_->reader_pin[slot_].load();
    if ((pin & 0xff) != buffer_ || ((pin & kPinTaken) != 0 && DaemonGone())) {
      MapNothing();  // our buffer is half written and nothing whole is pinned
      return;
    }
  }
}

void ReaderArea::MapNothing() {
  mmap(reinterpret_cast<void*>(control_->addr), control_->mapped_size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  control_->reader_pin[slot_].store(kNoPins);
  buffer_ = kNoBuffer;
  version_ = 0;
}

std::unique_ptr<ReaderArea> ReaderArea::Map(AreaControl* control, uint32_t index, uint32_t slot,
                                            int region_fd, const ControlHeader* daemon) {
  std::unique_ptr<ReaderArea> area(new ReaderArea(control, index, slot, region_fd, daemon));
  int rc = DSM_ERR_BUSY;
  for (int round = 0; round < 64 && rc == DSM_ERR_BUSY; ++round) rc = area->MoveToLatest();
  if (rc != DSM_OK) {
    if (rc == DSM_ERR_BUSY) {
      Fail(DSM_ERR_BUSY, "could not pin a version of '{}': the writer replaced every version "
           "before it could be mapped", control->name);
    }
    return nullptr;
  }
  if (control->is_replica) {
    std::lock_guard lock(g_replicas_mu);
    Replicas().push_back(area.get());
  }
  return area;
}

// The owner (ClientSession) gives the area's address range back to the region
// reservation; the parking spots are ours.
ReaderArea::~ReaderArea() {
  {
    std::lock_guard lock(g_replicas_mu);
    auto& v = Replicas();
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  control_->reader_pin[slot_].store(kNoPins);
  for (uint8_t* spot : spot_) {
    if (spot) munmap(spot, control_->mapped_size);
  }
}

bool ReaderArea::MapFresh(uint32_t buffer) {
  // MAP_POPULATE builds the page table in one pass instead of one fault per page.
  void* p = mmap(reinterpret_cast<void*>(control_->addr), control_->mapped_size, PROT_READ,
                 MAP_SHARED | MAP_FIXED | MAP_POPULATE, region_fd_,
                 static_cast<off_t>(control_->buffer_offset[buffer]));
  return p != MAP_FAILED;
}

void ReaderArea::Park(uint32_t buffer) {
  const size_t bytes = control_->mapped_size;
  if (!can_park_) return;
  if (!spot_[buffer]) {
    void* spot = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (spot == MAP_FAILED) return;
    spot_[buffer] = static_cast<uint8_t*>(spot);
  }
  // Moves the page tables to the spot and leaves the (now empty) mapping at the
  // area's address for the next buffer to replace: the address never has a hole.
  void* moved = mremap(reinterpret_cast<void*>(control_->addr), bytes, bytes,
                       MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, spot_[buffer]);
  if (moved == MAP_FAILED) {
    can_park_ = false;  // e.g. hugetlbfs, or an older kernel: map afresh every time
    return;
  }
  parked_[buffer] = true;
}

bool ReaderArea::Switch(uint32_t buffer) {
  const uint32_t old = buffer_;
  if (old == buffer) return true;  // a version written in place: mapped already
  if (old != kNoBuffer) Park(old);
  if (parked_[buffer]) {
    void* p = mremap(spot_[buffer], control_->mapped_size, control_->mapped_size,
                     MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(control_->addr));
    parked_[buffer] = false;
    if (p != MAP_FAILED) {
      // The spot is a hole now: reserve it again so nothing else lands there.
      void* again = mmap(spot_[buffer], control_->mapped_size, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
      if (again != spot_[buffer]) spot_[buffer] = nullptr;
      return true;
    }
  }
  return MapFresh(buffer);
}

bool ReaderArea::Behind() const {
  const uint64_t latest = control_->latest.load();
  return buffer_ == kNoBuffer || latest != PackLatest(version_, buffer_);
}

int ReaderArea::MoveToLatest() {
  // Any other latest version is followed, a lower one too: a replica that
  // resynced after a forged version publishes the writer's numbers again.
  if (!Behind()) return DSM_OK;
  LatestVersion latest{};
  if (!PinLatest(*control_, slot_, buffer_, &latest)) {
    return Fail(DSM_ERR_BUSY, "could not pin the newest version of '{}': the writer replaced it "
                "meanwhile; the next quiescent point tries again", control_->name);
  }
  if (!Switch(latest.buffer)) {
    const int err = errno;
    if (buffer_ != kNoBuffer) MapFresh(buffer_);
    SetPin(*control_, slot_, buffer_);
    return Fail(DSM_ERR_SYSTEM, "cannot map version {} of '{}': {}", latest.version,
                control_->name, strerror(err));
  }
  buffer_ = latest.buffer;
  version_ = latest.version;
  SetPin(*control_, slot_, buffer_);
  return DSM_OK;
}

}  // namespace dsm
