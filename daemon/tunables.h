// dsmd's own timing tunables: membership, directory and the loop's sleeps.
// Remote sync's timings and sizes are in SyncParams (coherence/sync_params.h).
// Units are in the names.
#ifndef DSM_DAEMON_TUNABLES_H_
#define DSM_DAEMON_TUNABLES_H_

#include <cstddef>
#include <cstdint>

namespace dsm {

// Every host tells every other it is alive this often...
inline constexpr uint64_t kHeartbeatIntervalNs = 100'000'000;
// ... and is marked down after this much silence.
inline constexpr uint64_t kHostDownAfterNs = 500'000'000;
// A HELLO (asking a host to confirm a new incarnation) unanswered this long
// is sent again, while that host's frames keep arriving.
inline constexpr uint64_t kHelloRetryNs = 20'000'000;
// Directory listings (with each area's latest version) go out this often
// while another host holds a replica of an area here, so that its staleness
// is refreshed well within the default 100 ms bound; otherwise with each
// heartbeat.
inline constexpr uint64_t kDirectoryIntervalNs = 40'000'000;
// A change to this host's listing (an area allocated, freed, sealed) goes out
// at once, but rounds are at least this far apart (a burst of allocations).
inline constexpr uint64_t kDirectoryMinGapNs = 1'000'000;
// A live area of another host takes the name of a replica here only once
// that replica's writer has been gone this long: a forged listing (one frame
// saying the writer is gone) is undone by the writer host's next real one
// well before.
inline constexpr uint64_t kNameTakeoverAfterNs = 4 * kDirectoryIntervalNs;
// How often dsmd looks whether the key file changed (a key rotation).
inline constexpr uint64_t kKeyFileCheckNs = 1'000'000'000;
// A remote host's directory entry is forgotten after this much silence.
inline constexpr uint64_t kDirectoryForgetNs = 1'000'000'000;
// Adaptive polling: sleep between idle turns, doubling every kIdleTurnsPerDoubling
// turns from min to max.
inline constexpr uint64_t kIdleSleepMinNs = 20'000;
inline constexpr uint64_t kIdleSleepMaxNs = 1'000'000;
inline constexpr uint32_t kIdleTurnsPerDoubling = 2;
// While replication traffic flowed within this window, idle sleeps stay short.
// Every sleep is a context switch, and on a machine whose cores the training
// fills each wake takes a core from a worker: at 50 us the daemons spent a
// fifth of their CPU going to sleep and waking (perf, 3-host Fashion-MNIST).
// 250 us gave 5% (full sync) and 13% (managed) more steps/s there, and the
// same or better rounds/s and p50 in dsm-bench memif f=1% (docs/measurements.md).
inline constexpr uint64_t kActiveWindowNs = 100'000'000;
inline constexpr uint64_t kActiveSleepMaxNs = 250'000;
// After this long without replication traffic, sleeps grow to kDeepIdleSleepMaxNs:
// an idle daemon wakes ~300 times a second (its heartbeats and listings need
// far fewer), and only the first frame after a long pause waits that long.
inline constexpr uint64_t kDeepIdleAfterNs = 1'000'000'000;
inline constexpr uint64_t kDeepIdleSleepMaxNs = 4'000'000;
// While a staged version waits for readers to free a buffer, dsmd looks again
// this often (readers do not wake it).
inline constexpr uint64_t kStageBlockedPollNs = 200'000;
// While a replica waits for local readers to leave its next spare
// (SyncParams::spare_await_ns), dsmd looks again after this long, then
// after as long as it waited so far (50, 50, 100, 200 ... us).
inline constexpr uint64_t kSpareAwaitPollNs = 50'000;
// While dsmd has work, its loop looks for client requests, doorbell rings
// and signals (a zero-timeout epoll_pwait2) at most this often.
inline constexpr uint64_t kBusyEpollGapNs = 50'000;
// Turns without work before the first idle sleep.
inline constexpr uint32_t kSpinTurnsBeforeSleep = 16;
// The same where frames wake dsmd (RemoteSync::rx_wake_fd): it then sleeps
// at once for the whole cap, woken by the next frame, and the cap after
// recent traffic is this (timers only: retransmissions, listings, budgets).
inline constexpr uint32_t kSpinTurnsWithRxWake = 2;
inline constexpr uint64_t kActiveSleepMaxWithRxWakeNs = 1'000'000;
// ... and while no replica assembles a version or waits for a buffer, no
// timer is due for tens of milliseconds (retransmissions, re-ACKs,
// listings): the sleep is this long. In 3-host Fashion-MNIST training a
// daemon spent most of each step between versions, woken every 1 ms for
// nothing (about 300 of its 900 sleeps a second).
inline constexpr uint64_t kQuietSleepMaxWithRxWakeNs = kDeepIdleSleepMaxNs;
// ... and after kDeepIdleAfterNs without replication traffic, until its own
// next heartbeat or listing, at most this long: an idle 3-host memif cluster
// woke each daemon about 300 times a second, mostly for nothing. Peers'
// heartbeats do not wake it (they are lazy): it reads them when it wakes
// for its own, well within kHostDownAfterNs.
inline constexpr uint64_t kLongIdleSleepMaxWithRxWakeNs = kHeartbeatIntervalNs;
// Forecast posts (PostForecast): dsmd looks for a writer's next version
// from shortly before it is due, so that the writer does not ring. The
// forecast needs this many spans at one pace (gaps between posts, or delays
// from the last version's delivery to the next post)...
inline constexpr uint32_t kPostForecastMinGaps = 4;
// ... and starts over when a span is this many times longer or shorter.
inline constexpr uint64_t kPostForecastPaceChange = 4;
// Writers posting less often than this are not forecast: a ring (31 us on
// this machine) is then a small part of their time.
inline constexpr uint64_t kPostForecastMaxGapNs = 100'000'000;
// A window reaches this far either side of the expected post at least...
inline constexpr uint64_t kPostPollMinHalfNs = 20'000;
// ... and dsmd wakes this much earlier still: a timed sleep here ends
// 120 us late at the median, 160-180 us at the 90th percentile.
inline constexpr uint64_t kPostPollWakeLeadNs = 150'000;
// dsmd looks through a window of at most this long, and at most this
// share of the writer's gap between posts (1/kPostPollShare).
inline constexpr uint64_t kPostPollMaxNs = 500'000;
inline constexpr uint64_t kPostPollShare = 3;
// A window narrowed to fit is kept only if it would have caught this many
// of every kPostForecastCaughtOf recent posts.
inline constexpr uint32_t kPostForecastCaught = 5;
inline constexpr uint32_t kPostForecastCaughtOf = 8;
// The multicast group every daemon of a cluster joins for fan-out of DATA.
inline constexpr uint16_t kClusterGroup = 1;
// Transfers framed but not yet seen leave the device queue, for the stage
// timeline's 'transmitted' marks (StageTimelineWriter): a queue that never
// drains must not grow the list; the oldest go unmarked.
inline constexpr size_t kTimelineMaxPendingTransmits = 256;

}  // namespace dsm

#endif  // DSM_DAEMON_TUNABLES_H_
