#include "daemon/stage_timeline.h"

#include "daemon/tunables.h"
#include "libdsm/contract/clock.h"

namespace dsm {

class StageTimelineWriter::AreaMarks : public StageMarks {
 public:
  AreaMarks(StageTimelineWriter* writer, uint16_t host, uint32_t index, uint32_t generation)
      : writer_(writer), host_(host), index_(index), generation_(generation) {}

  uint64_t NowNs() override { return MonotonicNs(); }

  void Mark(Stage stage, uint64_t version, uint16_t peer, uint64_t t_ns) override {
    TimelineEvent e{};
    e.t_ns = t_ns;
    e.version = version;
    e.origin_index = index_;
    e.origin_generation = generation_;
    e.origin_host = host_;
    e.peer = peer;
    e.stage = static_cast<uint8_t>(stage);
    writer_->Write(e);
    if (stage == Stage::kFramed) {
      if (writer_->framed_.size() >= kTimelineMaxPendingTransmits) {
        writer_->framed_.erase(writer_->framed_.begin());
      }
      writer_->framed_.push_back(e);
    }
  }

 private:
  StageTimelineWriter* writer_;
  uint16_t host_;
  uint32_t index_;
  uint32_t generation_;
};

std::unique_ptr<StageMarks> StageTimelineWriter::ForArea(uint16_t origin_host, uint32_t index,
                                                         uint32_t generation) {
  return std::make_unique<AreaMarks>(this, origin_host, index, generation);
}

void StageTimelineWriter::DeviceDrained() {
  if (framed_.empty()) return;
  const uint64_t now = MonotonicNs();
  for (TimelineEvent e : framed_) {
    e.stage = static_cast<uint8_t>(Stage::kTransmitted);
    e.t_ns = now;
    Write(e);
  }
  framed_.clear();
}

void StageTimelineWriter::Write(const TimelineEvent& e) {
  const uint64_t i = ring_->written.load(std::memory_order_relaxed);
  ring_->events[i % kTimelineEvents] = e;
  ring_->written.store(i + 1, std::memory_order_release);
}

}  // namespace dsm
