// The writer's side of one area in the writer's process: the change log that
// dsm_log() fills, the writer copy mapped read-write at the area's address, and
// the reader buffers mapped elsewhere so a publish can copy into them. Publish
// runs only at a quiescent point of this process (see QuiescenceGate). With page
// tracking, the pages written since the last publish are diffed against the
// latest version at publish, and the lines that differ join the change log.
#ifndef DSM_LIBDSM_WRITER_AREA_H_
#define DSM_LIBDSM_WRITER_AREA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "coherence/change_log.h"
#include "coherence/version_publisher.h"
#include "libdsm/contract/shm_layout.h"
#include "libdsm/page_tracker.h"
#include "libdsm/writer_stage.h"

namespace dsm {

class WriterArea {
 public:
  // Maps the area for writing and starts page tracking if `tracking` (a
  // dsm_tracking) asks for it, with `page_tracker` (a dsm_page_tracker) on pages
  // of `page_bytes`. An area with a stage hands its versions to dsmd through
  // it (`link`), unless the writer tracks pages. Returns nullptr (and sets
  // dsm_last_error) on failure.
  static std::unique_ptr<WriterArea> Map(AreaControl* control, uint32_t index, int region_fd,
                                         uint32_t tracking, uint32_t page_tracker,
                                         size_t page_bytes, DaemonLink link = {});
  ~WriterArea();

  // Publishes a new version if anything was logged. Returns DSM_OK, or
  // DSM_ERR_BUSY when every spare buffer is still pinned by readers. Staged:
  // the version is dsmd's to write into a buffer (local readers see it once
  // it did); if dsmd is gone, the writer takes the buffers back.
  int Publish(uint64_t now_ns);
  // Whether dsmd writes this area's versions (it has a stage, dsmd is there).
  bool staged() const { return stage_ != nullptr; }
  // Whether the sync interval has elapsed since the last publish.
  bool Due(uint64_t now_ns) const { return now_ns >= next_sync_ns_; }
  uint64_t next_sync_ns() const { return next_sync_ns_; }
  // A managed area's dsmd holds changed lines back (dsm_alloc_managed) and
  // the writer has stopped changing the area: a publish then makes a version
  // with nothing changed, so they can go. (While it keeps changing the area,
  // they go with its versions.)
  bool ManagedTopUpDue(uint64_t now_ns) const;
  // Whether a managed area's dsmd, as of the writer's newest version, holds
  // none of its lines back (always true for other areas, or unexported ones).
  bool ManagedSentWhole() const;
  // Publishes a version that carries waiting lines even while the writer
  // still counts as changing the area (for dsm_free and dsm_fini).
  int PublishWaitingLines(uint64_t now_ns);

  uint64_t version() const { return version_; }
  // The log the calling thread's dsm_log() writes: each thread that logs has
  // its own (a thread that exited leaves its log, marks and all, to the next
  // thread that asks), and a publish gathers them. Caller holds the session's
  // lock.
  ChangeLog& ThreadLog();
  AreaControl* control() const { return control_; }
  uint32_t index() const { return index_; }
  uintptr_t addr() const { return control_->addr; }
  uint64_t size() const { return control_->size; }

 private:
  WriterArea(AreaControl* control, uint32_t index);
  // Turns the pages written since the last call into logged lines.
  void LogWrittenLines();
  // Moves every other thread's marks into log_.
  void GatherThreadLogs();
  // Hands the version to dsmd through the stage.
  int PublishStaged(uint64_t now_ns);
  // dsmd is gone: from now on the writer writes its versions into the buffers.
  void TakeOverBuffers();

  AreaControl* control_;
  uint32_t index_;
  struct ThreadLogSlot {
    std::weak_ptr<const void> owner;  // ThisThreadToken() of the thread using it
    std::unique_ptr<ChangeLog> log;
  };
  static std::vector<ThreadLogSlot> FirstThreadLog(size_t area_bytes);
  std::vector<ThreadLogSlot> thread_logs_;  // never empty
  // What the next version carries: the first slot's log, into which a publish
  // gathers the other threads' marks (so a single writer thread's marks are
  // not moved) and page tracking marks the lines it found changed.
  ChangeLog& log_;
  VersionPublisher publisher_;
  LineSet changed_;  // lines of the version being published, for export
  uint8_t* buffers_[kMaxReaderBuffers] = {};
  uint64_t* export_logs_ = nullptr;  // two logs of export_pages masks each
  std::unique_ptr<PageTracker> tracker_;  // null: explicit logging only
  std::unique_ptr<WriterStage> stage_;    // null: the writer writes the buffers itself
  uint64_t version_ = 0;
  uint64_t next_sync_ns_ = 0;
  // When the last publish with changes began, and the gap before it.
  uint64_t last_change_ns_ = 0;
  uint64_t change_gap_ns_ = 0;
  bool flushing_ = false;  // PublishWaitingLines: top-ups whatever the idle rule
  void NoteChanges(uint64_t now_ns);
};

}  // namespace dsm

#endif  // DSM_LIBDSM_WRITER_AREA_H_
