// dsm-bench's per-version timeline: where the time from a writer's
// dsm_publish to a remote reader seeing the version goes, stage by stage,
// from the writer's and readers' own times and the stage marks of every
// host's dsmd (`dsmctl --json timeline`, coherence/stage_marks.h).
#ifndef DSM_BENCH_STAGE_BREAKDOWN_H_
#define DSM_BENCH_STAGE_BREAKDOWN_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

namespace dsm::bench {

struct StageInputs {
  uint64_t first_version = 0, last_version = 0;
  // The writer's dsm_publish call for version v: when it began and returned.
  std::function<uint64_t(uint64_t v)> publish_begin, publish_end;
  // When reader r's process first saw version v.
  std::function<uint64_t(uint32_t r, uint64_t v)> seen;
  nlohmann::json writer_host;               // its dsmd's timeline, the bench area's marks
  std::vector<nlohmann::json> reader_host;  // the same of reader r's host
};

// The stages in order, each ending where the next begins, so that per version
// they add up to publish-to-visible for the reader that saw it last:
// publish, wake (until dsmd starts collecting), collect, plan, frame (the last
// frame of that reader's transfer queued), transmit (the device queue
// drained), receive (the replica has the last frame), replica publish, reader
// (its process sees it). A mark out of order counts as the stage before's end.
// JSON: {"versions": n, "skipped": m, "total_ms_p50": x,
// "first_frame_after_plan_ms_p50": y (how soon the replica takes frames in
// while the sender still frames), "stages": [{"name", "p50_ms", "share_p50",
// "end_after_publish_call_ms_p50" (the stage's own end, not made to follow
// the stage before: collecting may end before dsm_publish returns)}, ...]}.
// Versions without every mark (collected together with the next, or
// overwritten in a ring) are skipped.
nlohmann::json StageBreakdown(const StageInputs& in);

}  // namespace dsm::bench

#endif  // DSM_BENCH_STAGE_BREAKDOWN_H_
