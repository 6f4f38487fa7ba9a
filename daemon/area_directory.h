// The host's directory of areas: dsmd's side of alloc, attach and free, kept in
// the shared control segment so clients read it without asking. Runs only on
// dsmd's control thread. Knows nothing about sockets, so tests drive it directly.
#ifndef DSM_DAEMON_AREA_DIRECTORY_H_
#define DSM_DAEMON_AREA_DIRECTORY_H_

#include <cstdint>
#include <string>
#include <unordered_map>

#include <optional>

#include "coherence/wire_format.h"
#include "daemon/backing.h"
#include "daemon/range_allocator.h"
#include "libdsm/control_protocol.h"
#include "libdsm/shm_layout.h"

namespace dsm {

struct Client {
  uint32_t id;
  int32_t pid;
};

struct DirectoryResult {
  int status = 0;  // dsm_code
  std::string message;
  uint32_t area_index = 0;
  uint32_t area_generation = 0;
  uint32_t reader_slot = 0;
};

class AreaDirectory {
 public:
  // `segment` is the mapped control segment (header already filled in).
  AreaDirectory(ControlSegment* segment, const Backing& backing);

  DirectoryResult Alloc(const Client& client, const Request& req, uint64_t now_ns);
  DirectoryResult Attach(const Client& client, const Request& req);
  DirectoryResult Free(const Client& client, const Request& req);
  // A client disconnected (exit or crash): seal what it wrote, unpin what it read.
  void ClientGone(const Client& client);

  // Remote sync (dsmd's RemoteSync):
  // A reader slot for dsmd itself, which pins versions it ships to other hosts.
  std::optional<uint32_t> ReserveDaemonSlot(uint32_t index);
  // A local area that holds a replica of another host's area, at the same
  // address; not attachable by name until NameReplica().
  std::optional<uint32_t> CreateReplica(const wire::DirectoryEntry& origin, uint16_t origin_host,
                                        uint64_t now_ns, std::string* error);
  // Makes a replica attachable by its name (unless a local area has it).
  bool NameReplica(uint32_t index);
  void SetReplicaWriterAlive(uint32_t index, bool alive);
  bool Named(uint32_t index) const;

  size_t live_areas() const { return by_name_.size(); }
  uint64_t backing_free_bytes() const { return backing_alloc_.free_bytes(); }

 private:
  AreaControl& area(uint32_t index) { return segment_->areas[index]; }
  bool HasReaders(const AreaControl& a) const;
  std::optional<uint32_t> FreeSlot();
  // Version 0 in buffer 0, no pins, counters zero: a fresh area's protocol state.
  static void ResetVersions(AreaControl& a, uint64_t now_ns, uint64_t confirmed_ns);
  // Frees an area's memory and slot once nobody can see it any more.
  void ReleaseIfUnused(uint32_t index);
  void Release(uint32_t index);
  // Removes the name so a new area may take it; readers keep the old copy.
  void Unname(uint32_t index);

  ControlSegment* segment_;
  Backing backing_;
  RangeAllocator address_alloc_;  // offsets within this host's slice
  RangeAllocator backing_alloc_;  // offsets within the backing file
  std::unordered_map<std::string, uint32_t> by_name_;
};

}  // namespace dsm

#endif  // DSM_DAEMON_AREA_DIRECTORY_H_
