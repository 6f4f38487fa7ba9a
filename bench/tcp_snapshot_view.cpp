#include "bench/tcp_snapshot_view.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "coherence/constants.h"
#include "coherence/line_copy.h"

namespace dsm::bench {

namespace {

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

TcpSnapshotView::~TcpSnapshotView() {
  for (uint8_t* b : buffers_) {
    if (b != nullptr) munmap(b, size_);
  }
  if (view_ != nullptr) munmap(view_, size_);
  if (fd_ >= 0) close(fd_);
}

bool TcpSnapshotView::Open(size_t size, std::string* error) {
  size_ = size;
  constexpr size_t kHugePage = size_t{2} << 20;
  if (size % kHugePage == 0) {
    fd_ = memfd_create("tcp-fanout-snapshots", MFD_CLOEXEC | MFD_HUGETLB);
    if (fd_ >= 0 && ftruncate(fd_, static_cast<off_t>(2 * size)) == 0) {
      // The pool may not hold both buffers: populate now to find out.
      void* probe =
          mmap(nullptr, 2 * size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
      if (probe != MAP_FAILED) {
        munmap(probe, 2 * size);
        huge_pages_ = true;
      }
    }
    if (!huge_pages_ && fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  if (fd_ < 0) {
    fd_ = memfd_create("tcp-fanout-snapshots", MFD_CLOEXEC);
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(2 * size)) != 0) {
      *error = Errno("memfd for the snapshot buffers");
      return false;
    }
  }
  for (int b = 0; b < 2; ++b) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_,
                   static_cast<off_t>(b * size));
    if (p == MAP_FAILED) {
      *error = Errno("mapping a snapshot buffer");
      return false;
    }
    buffers_[b] = static_cast<uint8_t*>(p);
  }
  void* v = mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd_, 0);
  if (v == MAP_FAILED) {
    *error = Errno("mapping the view");
    return false;
  }
  view_ = static_cast<uint8_t*>(v);
  return true;
}

bool TcpSnapshotView::Apply(std::span<const uint32_t> lines, const uint8_t* bytes, size_t stride,
                            std::string* error) {
  CatchUpSpare();
  const int spare = shown_ == 0 ? 1 : 0;
  uint8_t* dst = buffers_[spare];
  for (size_t i = 0; i < lines.size(); ++i) {
    if (size_t{lines[i]} * kLineBytes + kLineBytes > size_) {
      *error = "line " + std::to_string(lines[i]) + " is past the area's end";
      return false;
    }
    CopyLines(dst + size_t{lines[i]} * kLineBytes, bytes + i * stride, kLineBytes,
              LineStores::kStreaming);
  }
  StoreFence();
  if (mmap(view_, size_, PROT_READ, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd_,
           static_cast<off_t>(spare * size_)) == MAP_FAILED) {
    *error = Errno("mapping the view over the new version");
    return false;
  }
  shown_ = spare;
  shown_lines_.assign(lines.begin(), lines.end());
  spare_behind_ = true;
  return true;
}

void TcpSnapshotView::CatchUpSpare() {
  if (!spare_behind_) return;
  const uint8_t* src = buffers_[shown_];
  uint8_t* dst = buffers_[shown_ == 0 ? 1 : 0];
  for (uint32_t l : shown_lines_) {
    CopyLines(dst + size_t{l} * kLineBytes, src + size_t{l} * kLineBytes, kLineBytes,
              LineStores::kStreaming);
  }
  spare_behind_ = false;
}

}  // namespace dsm::bench
