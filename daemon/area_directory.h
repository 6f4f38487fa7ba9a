// The host's directory of areas: dsmd's side of alloc, attach and free, kept in
// the shared control segment so clients read it without asking. Runs only on
// dsmd's control thread. Knows nothing about sockets, so tests drive it directly.
#ifndef DSM_DAEMON_AREA_DIRECTORY_H_
#define DSM_DAEMON_AREA_DIRECTORY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <optional>

#include "coherence/wire_format.h"
#include "daemon/backing.h"
#include "daemon/range_allocator.h"
#include "libdsm/contract/control_protocol.h"
#include "libdsm/contract/shm_layout.h"

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
  // Whether writers that log explicitly get a stage (dsmd then writes their
  // versions into the buffers: StageAppliers). Off when writers cannot wake
  // dsmd (no doorbell).
  void set_stages(bool on) { stages_ = on; }

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
  // The replica stops being attachable by name (readers that have it keep it).
  void UnnameReplica(uint32_t index);
  // Live while the origin's host says its writer is; a retired replica stays as it is.
  void SetReplicaWriterAlive(uint32_t index, bool alive);
  // The replica's origin area is gone for good: its host restarted (a new
  // incarnation), or it was freed there (`freed`), or a new area took its
  // name. It stops being attachable by name and is never live again; local
  // readers keep its last version, and its memory goes back when the last
  // of them lets go.
  void RetireReplica(uint32_t index, bool freed);
  bool Named(uint32_t index) const;

  size_t live_areas() const { return by_name_.size(); }
  // Counts changes to what this host lists to others (an area allocated,
  // freed or sealed): a change is worth telling the other hosts at once.
  uint64_t listing_changes() const { return listing_changes_; }
  uint64_t backing_free_bytes() const { return backing_alloc_.free_bytes(); }

 private:
  AreaControl& area(uint32_t index) { return segment_->areas[index]; }
  bool HasReaders(const AreaControl& a) const;
  std::optional<uint32_t> FreeSlot();
  // What sets one area's control block apart; everything else starts the same.
  struct AreaLayout {
    std::string_view name;
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t mapped_size = 0;
    uint32_t buffers = 0;
    // In the backing, from here: the writer's copy (a replica's staging
    // copy), the reader buffers, the export logs, then the stage.
    uint64_t backing_offset = 0;
    uint64_t export_pages = 0;  // 0: no export logs (replicas)
    uint64_t export_bytes = 0;
    uint64_t stage_bytes = 0;  // after the export logs; 0: no stage
    uint64_t sync_interval_ns = 0;
    uint64_t staleness_bound_ns = 0;
    int32_t writer_pid = 0;
    uint32_t writer_client = 0;
    uint32_t owner_host = 0;
    // A replica's origin; an own area is its own origin.
    bool is_replica = false;
    uint32_t origin_host = 0;
    uint32_t origin_index = 0;
    uint32_t origin_generation = 0;
    // When the area was last known current (a replica: 0 until a version arrives).
    uint64_t confirmed_ns = 0;
    // A managed area's budget (0: not managed), as dsm_managed_opts.
    uint64_t managed_budget_bytes_per_s = 0;
    uint32_t managed_max_line_age = 0;
    uint32_t managed_element = 0;
  };
  // Fills slot `index` for a new area (a new generation, version 0 in buffer
  // 0, no pins, counters zero) and makes it live. Alloc and CreateReplica
  // both start an area here.
  void StartArea(uint32_t index, const AreaLayout& layout, uint64_t now_ns);
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
  uint64_t listing_changes_ = 0;
  std::vector<bool> retired_;  // by area index: RetireReplica was called
  bool stages_ = false;
};

}  // namespace dsm

#endif  // DSM_DAEMON_AREA_DIRECTORY_H_
