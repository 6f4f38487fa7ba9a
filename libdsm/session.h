// A process's connection to libdsm: the reserved region, the control segment,
// and the areas this process writes or reads. One per process, created by
// dsm_init(). The C API in c_api.cpp is a thin layer over it.
#ifndef DSM_LIBDSM_SESSION_H_
#define DSM_LIBDSM_SESSION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dsm/dsm.h"
#include "libdsm/control_client.h"
#include "libdsm/reader_area.h"
#include "libdsm/contract/shm_layout.h"
#include "libdsm/writer_area.h"

namespace dsm {

class ClientSession {
 public:
  // Connects and maps. DSM_OK or an error with dsm_last_error() set.
  static int Open(const dsm_init_opts* opts, std::unique_ptr<ClientSession>* out);
  ~ClientSession();

  // `managed`: nullptr for an area sent whole (dsm_alloc).
  int Alloc(const char* name, size_t size, const dsm_alloc_opts* opts,
            const dsm_managed_opts* managed, void** out);
  int Attach(const char* name, uint32_t timeout_ms, const void** out, size_t* out_size);
  int Free(const void* area);
  int Service();
  int Publish(const void* area);
  int WaitVersion(const void* area, uint64_t version, uint32_t timeout_ms);
  int Status(const void* area, dsm_area_status* st);
  int ManagedStatus(const void* area, dsm_managed_status* st);
  // `fn` names the C call, for the message.
  int Version(const char* fn, const void* area, uint64_t* out);
  int LogSlow(const void* ptr, size_t len);
  // Publishes what writers have pending and lets other hosts take it (bounded);
  // called by dsm_fini before teardown.
  void PublishAll();

 private:
  // A publish found every spare buffer pinned: if dsmd, which pins the version
  // it ships, is gone (stopped or crashed), its pins on `control` are cleared.
  // Returns whether it was gone.
  bool ReleasePinsOfGoneDaemon(AreaControl& control);
  struct Area {
    std::unique_ptr<WriterArea> writer;
    std::unique_ptr<ReaderArea> reader;
    AreaControl* control() const { return writer ? writer->control() : reader->control(); }
  };

  ClientSession() = default;
  // The area whose range contains `p`, or nullptr. Caller holds mu_.
  Area* FindLocked(const void* p);
  // Publishes due (or forced) writers and moves readers to new versions. Runs
  // only at a process-wide quiescent point.
  void SyncWork(uint64_t now_ns, const void* forced_area, int* forced_rc);
  bool AnythingDue(uint64_t now_ns);
  // dsm_wait_version's sleep, offline: returns once `reader`'s area has
  // `version`, the deadline passed, or sync work of this process is due
  // (a newer version of an area it reads, a writer area's interval).
  void SleepUntilVersionOrDue(ReaderArea& reader, uint64_t version, uint64_t deadline_ns);
  void UnmapRange(uintptr_t addr, uint64_t bytes);
  // Waits (until deadline_ns at most) until every host replicating the area
  // holds `version`.
  void DrainRemoteCopies(const AreaControl& control, uint64_t version, uint64_t deadline_ns);
  // A managed area's dsmd may still hold lines of the writer's versions back:
  // publishes versions that carry them until none waits (bounded).
  void FlushManaged(WriterArea& writer, uint64_t deadline_ns);

  ControlClient control_;
  ControlSegment* segment_ = nullptr;
  int region_fd_ = -1;
  bool region_reserved_ = false;
  uint32_t client_id_ = 0;
  uint64_t quiesce_timeout_ns_ = 0;
  uint64_t free_drain_ns_ = 0;

  std::mutex mu_;                        // guards areas_
  std::map<uintptr_t, Area> areas_;      // by address
};

}  // namespace dsm

#endif  // DSM_LIBDSM_SESSION_H_
