// What a TCP fan-out reader must do to give its users what a libdsm reader
// has: every version whole and unchanging while it is read, at one address.
// The view (a fixed address) shows one version's buffer while the next is
// written into the other, then is mapped over it (MAP_FIXED |
// MAP_POPULATE), as ReaderArea::MapFresh does. The buffer left behind is
// brought up to the shown version (the lines it missed) after the version is
// acknowledged, while the reader waits for the next one, as libdsm's
// replicas catch their spares up after a publish.
// Both buffers live in one memfd on 2 MiB pages when the machine has them
// free (libdsm's daemons back replicas on them too), otherwise 4 KiB pages.
// Lines are stored as libdsm's replicas store them (LineStores::kStreaming).
#ifndef DSM_BENCH_TCP_SNAPSHOT_VIEW_H_
#define DSM_BENCH_TCP_SNAPSHOT_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dsm::bench {

class TcpSnapshotView {
 public:
  TcpSnapshotView() = default;
  ~TcpSnapshotView();
  TcpSnapshotView(const TcpSnapshotView&) = delete;
  TcpSnapshotView& operator=(const TcpSnapshotView&) = delete;

  // Creates the buffers and the view for an area of `size` bytes (a multiple
  // of 64). False, with `error`, if it cannot.
  bool Open(size_t size, std::string* error);
  // Writes one version into the spare and shows it. `lines[i]` is the index
  // of the 64-byte line whose bytes are at `bytes + i * stride`.
  bool Apply(std::span<const uint32_t> lines, const uint8_t* bytes, size_t stride,
             std::string* error);
  // Copies the lines the shown version changed into the spare, which missed
  // them (Apply does it first if this was not called).
  void CatchUpSpare();

  const uint8_t* view() const { return view_; }
  bool huge_pages() const { return huge_pages_; }

 private:
  int fd_ = -1;
  size_t size_ = 0;
  bool huge_pages_ = false;
  uint8_t* buffers_[2] = {nullptr, nullptr};  // writable mappings of the two buffers
  uint8_t* view_ = nullptr;
  int shown_ = -1;                     // the buffer the view shows; -1 before the first version
  std::vector<uint32_t> shown_lines_;  // the lines the shown version changed
  bool spare_behind_ = false;          // the spare lacks shown_lines_
};

}  // namespace dsm::bench

#endif  // DSM_BENCH_TCP_SNAPSHOT_VIEW_H_
