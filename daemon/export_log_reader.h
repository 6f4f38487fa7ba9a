// dsmd's side of the export protocol (docs/region-layout.md): takes what a
// local writer's publishes changed out of the area's two export logs, so the
// lines dsmd ships are exactly those changed up to the version it pins.
// Runs on the daemon's sync thread; the writer process runs concurrently.
#ifndef DSM_DAEMON_EXPORT_LOG_READER_H_
#define DSM_DAEMON_EXPORT_LOG_READER_H_

#include <atomic>
#include <cstdint>

#include "coherence/line_set.h"
#include "libdsm/contract/shm_layout.h"

namespace dsm {

class ExportLogReader {
 public:
  // `logs`: the area's mapped pair of logs (2 x area.export_pages masks).
  ExportLogReader(AreaControl* area, std::atomic<uint64_t>* logs) : area_(*area), logs_(logs) {}

  // Moves the writer on to the other log, waits up to `wait_ns` for the
  // publish it may be in (which may still write the old log), then moves the
  // old log's lines into `into`. Returns false if the writer is still in that
  // publish: the old log then stays flipped away from, and the next Take
  // takes it without flipping again (flipping again would hand the writer
  // back a log it has not been emptied, and its lines would miss the version
  // shipped next).
  bool Take(LineSet* into, uint64_t wait_ns);
  // Newest version whose lines Take has moved out (0: none yet).
  uint64_t taken_version() const { return taken_version_; }
  // Adds the lines of the log the writer ORs into now, leaving them there
  // (the next Take takes them again): a superset of what changed since the
  // last Take, for a version pinned while the writer kept publishing.
  void AddCurrent(LineSet* into) const;

 private:
  AreaControl& area_;
  std::atomic<uint64_t>* logs_;
  int untaken_ = -1;  // flipped away from, not yet taken (the writer was mid-publish)
  uint64_t taken_version_ = 0;
};

}  // namespace dsm

#endif  // DSM_DAEMON_EXPORT_LOG_READER_H_
