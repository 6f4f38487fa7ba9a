// dsm-bench's coordination board: one small MAP_SHARED file on the filesystem
// every host of the virtual cluster shares (network namespaces separate the
// network, not the files). The writer creates it; each reader, one process per
// host, opens it and reports readiness, the newest version it sees and when it
// saw each version. Timestamps are CLOCK_MONOTONIC, which is one clock for
// every process on the machine, so publish-to-visible latency can be taken
// across processes and namespaces.
#ifndef DSM_BENCH_DSM_BENCH_BOARD_H_
#define DSM_BENCH_DSM_BENCH_BOARD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dsm::bench {

inline constexpr uint64_t kBoardMagic = 0x3142'4e45'424d'5344ULL;  // "DSMBENB1"
inline constexpr int kBoardMaxReaders = 8;
inline constexpr size_t kBoardMessageBytes = 256;

enum class WriterState : uint32_t {
  kStarting = 0,
  kReady = 1,   // the area exists (version 0); version 1, the whole area, once readers attached
  kDone = 2,    // final_version is set; readers finish once they see it
  kFailed = 3,  // writer_error says why; readers stop
};

enum class ReaderState : int32_t {
  kAbsent = 0,
  kReady = 1,   // attached (holds version 0 or later)
  kDone = 2,    // saw final_version and reported
  kFailed = 3,  // error says why
};

struct ReaderSlot {
  std::atomic<int32_t> state;
  int32_t pid;
  std::atomic<uint64_t> seen;  // newest version visible in the reader process
  uint64_t distinct_versions;  // versions it moved to (fewer than published: coalesced)
  uint64_t stamp_errors;       // a version whose stamp line did not say that version
  uint64_t final_version;
  uint64_t final_hash;         // XXH3 of the area at final_version (with --verify)
  uint64_t attach_ns;          // dsm_init + dsm_attach
  // dsm_attach's return less the later of its call and the writer's
  // dsm_alloc call: the time to the first version (the whole area).
  uint64_t first_version_ns;
  uint64_t wait_timeouts;      // dsm_wait_version calls that timed out (no progress yet)
  char error[kBoardMessageBytes];
};

struct BoardHeader {
  uint64_t magic;
  uint64_t capacity;  // versions 0..capacity-1 have a slot in the time arrays
  uint64_t area_bytes;
  uint32_t readers;
  uint32_t verify;
  // A managed area (--managed-mbps): lines may lag, so line 0 carries no
  // version stamp; readers check only the final content.
  uint32_t managed;
  char area_name[64];
  std::atomic<uint32_t> writer_state;
  // Bumped by a reader each time it records a newer `seen`; the writer sleeps
  // on it (futex) while it waits for readers, as a TCP writer sleeps in poll().
  std::atomic<uint32_t> progress;
  std::atomic<uint64_t> alloc_ns;  // CLOCK_MONOTONIC when the writer called dsm_alloc
  std::atomic<uint64_t> final_version;
  uint64_t final_hash;
  char writer_error[kBoardMessageBytes];
  ReaderSlot reader[kBoardMaxReaders];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// The mapped board: the header, then publish_ns[capacity], then
// visible_ns[readers][capacity] (0: not seen yet).
class Board {
 public:
  Board() = default;
  ~Board();
  Board(const Board&) = delete;
  Board& operator=(const Board&) = delete;

  // Writer: creates the file (atomically, via a temporary name and rename).
  bool Create(const std::string& path, uint32_t readers, uint64_t capacity, uint64_t area_bytes,
              const std::string& area_name, bool verify, std::string* error);
  // Reader: opens a board the writer created, waiting up to timeout_ms for it.
  bool Open(const std::string& path, uint32_t timeout_ms, std::string* error);

  BoardHeader* header() const { return header_; }
  uint64_t* publish_ns() const { return publish_ns_; }
  uint64_t* visible_ns(uint32_t reader) const {
    return visible_ns_ + static_cast<size_t>(reader) * header_->capacity;
  }

  static size_t FileBytes(uint32_t readers, uint64_t capacity);

 private:
  bool Map(int fd, size_t bytes, std::string* error);

  void* map_ = nullptr;
  size_t bytes_ = 0;
  BoardHeader* header_ = nullptr;
  uint64_t* publish_ns_ = nullptr;
  uint64_t* visible_ns_ = nullptr;
};

// Copies a message into a fixed board field, always terminated.
void SetMessage(char (&field)[kBoardMessageBytes], const std::string& text);

}  // namespace dsm::bench

#endif  // DSM_BENCH_DSM_BENCH_BOARD_H_
