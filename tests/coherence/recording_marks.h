// A StageMarks for tests: a clock that advances 1 µs per reading, and every
// mark in the order it was made.
#ifndef DSM_TESTS_COHERENCE_RECORDING_MARKS_H_
#define DSM_TESTS_COHERENCE_RECORDING_MARKS_H_

#include <cstdint>
#include <vector>

#include "coherence/stage_marks.h"

namespace dsm::testing {

class RecordingMarks : public StageMarks {
 public:
  struct Entry {
    Stage stage;
    uint64_t version;
    uint16_t peer;
    uint64_t t_ns;
  };
  std::vector<Entry> marks;

  uint64_t NowNs() override { return now_ += 1000; }
  void Mark(Stage stage, uint64_t version, uint16_t peer, uint64_t t_ns) override {
    marks.push_back({stage, version, peer, t_ns});
  }

  // The stages marked for `version`, in order.
  std::vector<Stage> StagesOf(uint64_t version) const {
    std::vector<Stage> out;
    for (const Entry& e : marks) {
      if (e.version == version) out.push_back(e.stage);
    }
    return out;
  }
  // Whether the marks' times never go back.
  bool InTimeOrder() const {
    for (size_t i = 1; i < marks.size(); ++i) {
      if (marks[i].t_ns < marks[i - 1].t_ns) return false;
    }
    return true;
  }

 private:
  uint64_t now_ = 0;
};

}  // namespace dsm::testing

#endif  // DSM_TESTS_COHERENCE_RECORDING_MARKS_H_
