// The workload of the multi-host tests: a writer on one host changes random
// lines of an area and stamps each version (line 0 holds the version number and
// an XXH3 of the rest), and keeps a linked list in a second area; readers on
// other hosts attach both by name, check every snapshot is one complete version,
// that versions only increase, walk the list, and compare final hashes.
#ifndef DSM_TESTS_MULTIHOST_REPLICATION_WORKLOAD_H_
#define DSM_TESTS_MULTIHOST_REPLICATION_WORKLOAD_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace dsm::testing {

inline constexpr int kMaxReaders = 4;

struct ReaderReport {
  uint64_t snapshots = 0;
  uint64_t distinct_versions = 0;
  uint64_t torn = 0;       // a snapshot that is not exactly one version
  uint64_t backwards = 0;  // a version lower than one seen before
  uint64_t final_version = 0;
  uint64_t final_hash = 0;
  uint64_t list_sum = 0;   // sum over the linked list, walked by pointer
  int attach_rc = 0;
};

struct WorkloadBoard {
  std::atomic<bool> allocated{false};
  std::atomic<int> readers_attached{0};
  std::atomic<int> readers_done{0};
  std::atomic<bool> writer_done{false};
  std::atomic<bool> writer_may_exit{false};
  std::atomic<bool> writer_stop{false};  // publish no more: the last version is final
  std::atomic<bool> writer_hold{false};  // stay after the readers are done (until writer_may_exit)
  std::atomic<bool> readers_stop{false};  // readers leave now, wherever they are
  std::atomic<uint64_t> writer_version{0};
  uint64_t writer_hash = 0;
  uint64_t list_sum = 0;
  ReaderReport readers[kMaxReaders];
};

struct WorkloadOptions {
  uint64_t versions = 300;
  size_t area_bytes = 1u << 20;
  double dirty_fraction = 0.01;
  uint32_t pause_us = 2000;  // between versions
  int readers = 2;
  // Readers 0 .. waiting_readers-1 sleep in dsm_wait_version for the next
  // version between snapshots (so dsmd may write it in place while they
  // sleep); the others poll with dsm_service.
  int waiting_readers = 0;
  int reader_timeout_s = 60;
  uint64_t seed = 42;  // which lines change: two writers of one name differ by seed
};

// The stamp in line 0 of each version: its number and the XXH3 of everything
// after line 0.
struct Stamp {
  uint64_t version;
  uint64_t hash;
};

// dsm_init with the daemon at `socket`.
bool Init(const std::string& socket);

// A reader that attaches "mh/area", waits for version `want` and checks the
// snapshot is exactly one version (*seen: which). Returns 0, or a code saying
// which step failed.
int AttachAndCheck(const std::string& socket, uint64_t want, size_t area_bytes, uint64_t* seen);

// Run in forked children; return 0 on success (the board has the details).
int RunWriter(const std::string& socket, const WorkloadOptions& o, WorkloadBoard* b);
int RunReader(const std::string& socket, int id, const WorkloadOptions& o, WorkloadBoard* b);

}  // namespace dsm::testing

#endif  // DSM_TESTS_MULTIHOST_REPLICATION_WORKLOAD_H_
