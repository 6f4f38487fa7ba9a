// The moments of one version's way from its writer's host to a replica that
// dsmd marks, for the per-version timeline (`dsmctl timeline`, dsm-bench's
// stage table). AreaExport and AreaImport say when a stage ends; the host
// (dsmd) reads the clock and keeps the marks, so both stay free of time
// sources of their own.
#ifndef DSM_COHERENCE_STAGE_MARKS_H_
#define DSM_COHERENCE_STAGE_MARKS_H_

#include <cstdint>

namespace dsm {

// In the order a version passes them. Export stages are marked per transfer
// (peer: its host, or wire::kAllHosts); import stages per replica.
enum class Stage : uint8_t {
  kCollectBegin = 1,  // dsmd saw a new version and starts taking its changes
  kCollected = 2,     // its changed lines taken and its buffer pinned
  kPlanned = 3,       // a transfer of it to a host planned into frames
  kFramed = 4,        // the transfer's last frame handed to the device queue
  kTransmitted = 5,   // the device queue drained after that (dsmd, not AreaExport)
  kFirstFrame = 6,    // a replica took the version's first frame
  kAssembled = 7,     // ... its last missing frame: the version is complete
  kPublished = 8,     // ... and local readers can read it
};
inline constexpr int kStageCount = 8;

inline const char* StageName(Stage s) {
  switch (s) {
    case Stage::kCollectBegin:
      return "collect_begin";
    case Stage::kCollected:
      return "collected";
    case Stage::kPlanned:
      return "planned";
    case Stage::kFramed:
      return "framed";
    case Stage::kTransmitted:
      return "transmitted";
    case Stage::kFirstFrame:
      return "first_frame";
    case Stage::kAssembled:
      return "assembled";
    case Stage::kPublished:
      return "published";
  }
  return "?";
}

// Where one area's marks go.
class StageMarks {
 public:
  virtual ~StageMarks() = default;
  virtual uint64_t NowNs() = 0;
  virtual void Mark(Stage stage, uint64_t version, uint16_t peer, uint64_t t_ns) = 0;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_STAGE_MARKS_H_
