// dsmd's per-version timeline: the stage marks of AreaExport and AreaImport
// (coherence/stage_marks.h), stamped with the clock and written to the ring
// in the control segment (StageTimeline), where dsmctl and dsm-bench read
// them. Also marks kTransmitted, which only dsmd sees: the device queue
// drained after a transfer's last frame was framed.
#ifndef DSM_DAEMON_STAGE_TIMELINE_H_
#define DSM_DAEMON_STAGE_TIMELINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "coherence/stage_marks.h"
#include "libdsm/contract/daemon_state.h"

namespace dsm {

class StageTimelineWriter {
 public:
  explicit StageTimelineWriter(StageTimeline* ring) : ring_(ring) {}

  // The marks of one area (`origin_host`'s area `index`, `generation`).
  std::unique_ptr<StageMarks> ForArea(uint16_t origin_host, uint32_t index, uint32_t generation);

  // The transport's queue is empty: every transfer framed since the last
  // call is transmitted now.
  void DeviceDrained();
  bool transmit_pending() const { return !framed_.empty(); }

 private:
  class AreaMarks;
  void Write(const TimelineEvent& e);

  StageTimeline* ring_;
  std::vector<TimelineEvent> framed_;  // kFramed marks not followed by kTransmitted yet
};

}  // namespace dsm

#endif  // DSM_DAEMON_STAGE_TIMELINE_H_
