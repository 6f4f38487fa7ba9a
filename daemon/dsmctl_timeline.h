// `dsmctl timeline`: the stage marks dsmd keeps of each version's way from its
// writer's host to replicas (libdsm/contract/daemon_state.h, StageTimeline).
#ifndef DSM_DAEMON_DSMCTL_TIMELINE_H_
#define DSM_DAEMON_DSMCTL_TIMELINE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "libdsm/contract/shm_layout.h"

namespace dsm {

// The marks in the ring now, oldest first, of the area this host knows as
// `area` (its own or a replica; "" for every area). JSON: {"columns": [...],
// "events": [[t_ns, version, origin_host, origin_index, origin_generation,
// peer, stage], ...]}; `error` if no area has that name.
nlohmann::json TimelineJson(const ControlSegment& seg, const std::string& area, std::string* error);

// Per version, each stage's time after the version's first mark, in µs.
void PrintTimeline(const nlohmann::json& timeline, size_t last_versions);

}  // namespace dsm

#endif  // DSM_DAEMON_DSMCTL_TIMELINE_H_
