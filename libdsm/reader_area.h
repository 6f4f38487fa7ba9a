// A reader's side of one area: the read-only mapping of one reader buffer at
// the area's fixed address, and the pin that keeps the writer off that buffer.
// MoveToLatest() runs only at a quiescent point of this process.
#ifndef DSM_LIBDSM_READER_AREA_H_
#define DSM_LIBDSM_READER_AREA_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "libdsm/contract/shm_layout.h"

namespace dsm {

class ReaderArea {
 public:
  // Pins and maps the newest complete version. nullptr (dsm_last_error set) on failure.
  // `daemon`: the host's control header (whether dsmd still runs).
  static std::unique_ptr<ReaderArea> Map(AreaControl* control, uint32_t index, uint32_t slot,
                                         int region_fd, const ControlHeader* daemon);
  ~ReaderArea();

  // Whether a newer complete version exists than the one mapped. Lock-free.
  // The area's latest version is not the one this process maps: a newer one,
  // or (a replica that resynced after a forged version) another.
  bool Behind() const;
  // Maps the newest complete version. DSM_OK, DSM_ERR_BUSY (the writer kept
  // replacing it; try again later) or DSM_ERR_SYSTEM.
  int MoveToLatest();

  // In-place versions (docs/region-layout.md): the quiescence gate's hooks.
  // Every replica this process reads yields its pin while no thread of the
  // process can read (dsmd may then write the next version into the buffer
  // in place), and takes it back before one can, waiting for such a write
  // to end; if dsmd died meanwhile (or stays stopped for seconds), it moves
  // to the newest buffer that holds a whole version, an older one.
  static void YieldReplicas();
  static void ReclaimReplicas();

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  uint32_t buffer() const { return buffer_.load(std::memory_order_relaxed); }
  AreaControl* control() const { return control_; }
  uint32_t index() const { return index_; }
  uint32_t slot() const { return slot_; }
  uintptr_t addr() const { return control_->addr; }
  uint64_t size() const { return control_->size; }

 private:
  ReaderArea(AreaControl* control, uint32_t index, uint32_t slot, int region_fd,
             const ControlHeader* daemon)
      : control_(control), index_(index), slot_(slot), region_fd_(region_fd), daemon_(daemon) {}
  bool DaemonGone() const;
  // Puts `buffer` at the area's address: by moving its parked, already
  // populated mapping there (page tables move, nothing refaults), or by mapping
  // it afresh. The buffer that was there is parked in its spot.
  bool Switch(uint32_t buffer);
  void Reclaim();
  // Unreadable (PROT_NONE) at the area's address, holding no buffer: the
  // last resort when the buffer it mapped was left half written.
  void MapNothing();
  bool MapFresh(uint32_t buffer);
  void Park(uint32_t buffer);

  AreaControl* control_;
  uint32_t index_;
  uint32_t slot_;
  int region_fd_;
  const ControlHeader* daemon_;
  // Written at quiescent points, and by the gate's hook while every thread
  // is offline; read by offline threads too (Behind, while they sleep).
  std::atomic<uint32_t> buffer_{kNoBuffer};
  std::atomic<uint64_t> version_{0};
  // Where each buffer waits, mapped and populated, while another one is at the
  // area's address: a private PROT_NONE reservation per buffer.
  uint8_t* spot_[kMaxReaderBuffers] = {};
  bool parked_[kMaxReaderBuffers] = {};
  bool can_park_ = true;  // mremap(MREMAP_DONTUNMAP) works on this backing
};

}  // namespace dsm

#endif  // DSM_LIBDSM_READER_AREA_H_
