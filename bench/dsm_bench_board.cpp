#include "bench/dsm_bench_board.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

namespace dsm::bench {

namespace {

constexpr size_t kHeaderRegionBytes = 16384;  // the header, rounded up; arrays follow
static_assert(sizeof(BoardHeader) <= kHeaderRegionBytes);

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

void SetMessage(char (&field)[kBoardMessageBytes], const std::string& text) {
  const size_t n = std::min(text.size(), kBoardMessageBytes - 1);
  std::memcpy(field, text.data(), n);
  field[n] = '\0';
}

size_t Board::FileBytes(uint32_t readers, uint64_t capacity) {
  return kHeaderRegionBytes + static_cast<size_t>(capacity) * 8 * (1 + readers);
}

Board::~Board() {
  if (map_ != nullptr) munmap(map_, bytes_);
}

bool Board::Map(int fd, size_t bytes, std::string* error) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = Errno("mmap of the board");
    return false;
  }
  map_ = p;
  bytes_ = bytes;
  header_ = static_cast<BoardHeader*>(p);
  publish_ns_ = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(p) + kHeaderRegionBytes);
  return true;
}

bool Board::Create(const std::string& path, uint32_t readers, uint64_t capacity,
                   uint64_t area_bytes, const std::string& area_name, bool verify,
                   std::string* error) {
  if (readers < 1 || readers > kBoardMaxReaders) {
    *error = "readers must be 1.." + std::to_string(kBoardMaxReaders);
    return false;
  }
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = Errno("cannot create the board " + tmp);
    return false;
  }
  const size_t bytes = FileBytes(readers, capacity);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *error = Errno("cannot size the board " + tmp);
    close(fd);
    unlink(tmp.c_str());
    return false;
  }
  const bool mapped = Map(fd, bytes, error);
  close(fd);
  if (!mapped) {
    unlink(tmp.c_str());
    return false;
  }
  // The file is zero-filled: every atomic starts at 0 (kStarting / kAbsent).
  BoardHeader* h = new (header_) BoardHeader{};
  h->capacity = capacity;
  h->area_bytes = area_bytes;
  h->readers = readers;
  h->verify = verify ? 1 : 0;
  std::snprintf(h->area_name, sizeof(h->area_name), "%s", area_name.c_str());
  visible_ns_ = publish_ns_ + capacity;
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kBoardMagic;
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    *error = Errno("cannot rename the board to " + path);
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool Board::Open(const std::string& path, uint32_t timeout_ms, std::string* error) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int fd = -1;
  for (;;) {
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) break;
    if (errno != ENOENT || std::chrono::steady_clock::now() > deadline) {
      *error = Errno("cannot open the board " + path + " (is the writer running?)");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < kHeaderRegionBytes) {
    *error = "the board " + path + " is too small to be one";
    close(fd);
    return false;
  }
  const bool mapped = Map(fd, static_cast<size_t>(st.st_size), error);
  close(fd);
  if (!mapped) return false;
  if (header_->magic != kBoardMagic ||
      FileBytes(header_->readers, header_->capacity) != static_cast<size_t>(st.st_size)) {
    *error = "the board " + path + " is not a dsm-bench board of this build";
    return false;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  visible_ns_ = publish_ns_ + header_->capacity;
  return true;
}

}  // namespace dsm::bench
