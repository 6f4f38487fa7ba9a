// Forged frames for the storm test: what a buggy or hostile host, a bad NIC
// or a replay of mutated captures puts on the wire. Each frame is of a random
// type (DATA, ACK, HEARTBEAT, DIRECTORY, SUBSCRIBE, HELLO, HELLO_REPLY, or no
// type at all), starts from the genuine addressing of `base` (the area, the
// sender's incarnation, the hosts) and then has header fields set to extreme
// or random values (32- and 64-bit alike), its payload bit-flipped,
// truncated, extended or replaced by garbage; almost all are sealed with a
// valid checksum, so the checksum does not stop them.
#ifndef DSM_TESTS_MULTIHOST_STORM_FRAMES_H_
#define DSM_TESTS_MULTIHOST_STORM_FRAMES_H_

#include <cstdint>
#include <random>
#include <vector>

#include "tests/multihost/raw_frame_sender.h"

namespace dsm::testing::rawframe {

// The UDP payload of one storm frame; `base.version` should be near the
// area's current version, `base.first_line + base.line_count` its lines.
std::vector<uint8_t> BuildStormPayload(const DataSpec& base, std::mt19937_64* rng);

}  // namespace dsm::testing::rawframe

#endif  // DSM_TESTS_MULTIHOST_STORM_FRAMES_H_
