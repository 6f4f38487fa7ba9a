// Messages between a client (libdsm) and its host's dsmd over a SOCK_SEQPACKET
// Unix socket: one fixed-size request, one fixed-size reply. Used only for setup
// (hello, alloc, attach, free); the data path is shared memory.
#ifndef DSM_LIBDSM_CONTRACT_CONTROL_PROTOCOL_H_
#define DSM_LIBDSM_CONTRACT_CONTROL_PROTOCOL_H_

#include <cstdint>

#include "coherence/constants.h"
#include "dsm/dsm.h"

namespace dsm {

inline constexpr uint32_t kProtocolMagic = 0x44534d31;  // "DSM1"
inline constexpr uint32_t kProtocolVersion = 2;
inline constexpr size_t kMaxMessageChars = 256;

enum class RequestType : uint32_t {
  kHello = 1,   // reply carries the control segment, region backing and doorbell fds
  kAlloc = 2,
  kAttach = 3,
  kFree = 4,
};

enum class NoticeType : uint32_t {
  kReply = 1,
  kShutdown = 2,  // unsolicited: the daemon is stopping
};

struct Request {
  uint32_t magic;
  uint32_t protocol_version;
  RequestType type;
  int32_t pid;
  char name[kMaxNameBytes];
  uint64_t size;
  uint32_t sync_interval_us;
  uint32_t staleness_bound_ms;
  uint32_t reader_buffers;
  uint32_t area_index;
  uint32_t area_generation;
  uint32_t tracking;  // kAlloc: the writer's dsm_tracking (a stage only for DSM_TRACK_LOG)
  // kAlloc of a managed area (dsm_alloc_managed); 0: not managed.
  uint64_t managed_budget_bytes_per_s;
  uint32_t managed_max_line_age;
  uint32_t managed_element;  // dsm_element
};

// A dsm_managed_opts.element dsmd ranks lines by (0 means DSM_ELEMENT_FLOAT32).
inline bool IsManagedElement(uint32_t element) {
  return element == 0 || element == DSM_ELEMENT_FLOAT32 || element == DSM_ELEMENT_FLOAT32_ABSOLUTE;
}
inline constexpr const char* kManagedElementsHelp =
    "DSM_ELEMENT_FLOAT32 (or 0 for it) or DSM_ELEMENT_FLOAT32_ABSOLUTE";

struct Reply {
  uint32_t magic;
  NoticeType type;
  int32_t status;  // dsm_code
  uint32_t client_id;
  uint32_t area_index;
  uint32_t area_generation;
  uint32_t reader_slot;
  uint32_t reserved;
  char message[kMaxMessageChars];
};

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_CONTROL_PROTOCOL_H_
