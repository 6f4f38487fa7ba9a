// dsmd's timing tunables, in one place. Units are in the names.
#ifndef DSM_DAEMON_TUNABLES_H_
#define DSM_DAEMON_TUNABLES_H_

#include <cstddef>
#include <cstdint>

namespace dsm {

// Every host tells every other it is alive this often...
inline constexpr uint64_t kHeartbeatIntervalNs = 100'000'000;
// ... and is marked down after this much silence.
inline constexpr uint64_t kHostDownAfterNs = 500'000'000;
// Directory listings (with each area's latest version) go out this often, so a
// replica's staleness is refreshed well within the default 100 ms bound.
inline constexpr uint64_t kDirectoryIntervalNs = 40'000'000;
// A remote host's directory entry is forgotten after this much silence.
inline constexpr uint64_t kDirectoryForgetNs = 1'000'000'000;
// A transfer not acknowledged within this time after its last frame is resent
// (as the union of everything the host lacks, at the newest version), or
// within what the host's acknowledgements took lately if longer
// (ReplicaSender::HostRto).
inline constexpr uint64_t kRetransmitTimeoutNs = 20'000'000;
// ... plus this many times as long as sending the transfer took.
inline constexpr uint64_t kRetransmitPerSendTime = 4;
// A receiver acks frames it cannot use at most once per this gap.
inline constexpr uint64_t kAckMinGapNs = 2'000'000;
// A receiver missing frames of a transfer asks for them after this much quiet.
// Not less: on a busy machine veth delivery is deferred to ksoftirqd for
// milliseconds, and a 3 ms NACK resent frames that were only late (3-host
// training: 1/3 of DATA frames were such resends; 10 ms cut them 6-10x and
// raised samples/s by 22%).
inline constexpr uint64_t kNackAfterNs = 10'000'000;
// Frames handed to the transport per loop turn before other work gets a turn.
inline constexpr uint32_t kSendBurstFrames = 256;
// Adaptive polling: sleep between idle turns, doubling every kIdleTurnsPerDoubling
// turns from min to max.
inline constexpr uint64_t kIdleSleepMinNs = 20'000;
inline constexpr uint64_t kIdleSleepMaxNs = 1'000'000;
inline constexpr uint32_t kIdleTurnsPerDoubling = 2;
// While replication traffic flowed within this window, idle sleeps stay short.
inline constexpr uint64_t kActiveWindowNs = 100'000'000;
inline constexpr uint64_t kActiveSleepMaxNs = 50'000;
// Turns without work before the first idle sleep.
inline constexpr uint32_t kSpinTurnsBeforeSleep = 16;
// Waiting for a writer to finish the publish it is in (it copies at memory
// speed: a 64 MiB area takes ~10 ms); longer, and the collect is retried later.
inline constexpr uint64_t kExportWaitNs = 50'000'000;

// A receiver that reported missing frames this recently, and fewer than
// kLossMemoryTransfers transfers ago, may do so again (LossMemory): a version
// whose buffer the writer needs is then copied into the shadow, so its frames
// can still be resent.
inline constexpr uint64_t kLossMemoryNs = 10'000'000'000;
inline constexpr uint32_t kLossMemoryTransfers = 16;

// DATA claiming a version this far beyond the writer host's advertised latest is
// dropped (directory listings lag by at most kDirectoryIntervalNs; no writer
// publishes a million versions in that time).
inline constexpr uint64_t kVersionSlack = 1'000'000;

// The multicast group every daemon of a cluster joins for fan-out of DATA.
inline constexpr uint16_t kClusterGroup = 1;

}  // namespace dsm

#endif  // DSM_DAEMON_TUNABLES_H_
