// Every timing and size of remote sync, in one place: AreaExport and
// AreaImport take them, dsmd and the tests read the same defaults, and dsmd's
// flags may override them. Units are in the names.
#ifndef DSM_COHERENCE_SYNC_PARAMS_H_
#define DSM_COHERENCE_SYNC_PARAMS_H_

#include <cstddef>
#include <cstdint>

namespace dsm {

struct SyncParams {
  // A transfer not acknowledged within this time after its last frame is
  // resent (as the union of everything the host lacks, at the newest
  // version), or within what the host's acknowledgements took lately if
  // longer (ReplicaSender::HostRto) ...
  uint64_t retransmit_timeout_ns = 20'000'000;
  // ... plus this many times as long as sending the transfer took.
  uint64_t retransmit_per_send_time = 4;
  // A receiver acks frames it cannot use at most once per this gap.
  uint64_t ack_min_gap_ns = 2'000'000;
  // A receiver missing frames of a transfer asks for them after this much
  // quiet. Not less: on a busy machine veth delivery is deferred to ksoftirqd
  // for milliseconds, and a 3 ms NACK resent frames that were only late
  // (3-host training: 1/3 of DATA frames were such resends; 10 ms cut them
  // 6-10x and raised samples/s by 22%).
  uint64_t nack_after_ns = 10'000'000;
  // ... but frames of a transfer arrive in the order they were sent (late
  // or not), and resends in ascending order too: once the last frame of a
  // pass has arrived (the transfer's last, or the last one a NACK asked
  // for), a gap before it is loss, not lateness, and is asked for after this
  // much quiet. At 1% loss almost every 64 MiB f = 1% version (~550 frames)
  // loses one; waiting the full quiet for each cut goodput to 0.2-0.3x.
  uint64_t nack_after_tail_ns = 1'000'000;
  // A NACK lists at most this many missing ranges of frames, in as many ACK
  // frames as it takes (wire::kMaxMissingRanges each). A 64 MiB version at
  // 5% loss misses ~2,500 single frames of its ~50,000 at MTU 1500: asking
  // for them 64 at a time took ~40 NACK rounds (~0.4 s of quiet alone).
  uint32_t nack_max_ranges = 1024;
  // Frames handed to the transport per area and loop turn before other work
  // gets a turn (new transfers and resends alike); also the device backlog
  // above which no more are framed. Each turn ends with a flush, so this is
  // also how soon a receiver gets a transfer's first frames: 256 held them
  // back until 256 were framed. 64 MiB on memif 1500, medians of 5
  // alternated runs: 1% of lines 425 -> 465 rounds/s with 48, p50 1.68 ->
  // 1.58 ms; 100% 18.1 -> 19.3 rounds/s (3 runs).
  uint32_t send_burst_frames = 48;
  // A receiver that reported missing frames this recently, and fewer than
  // loss_memory_transfers transfers ago, may do so again (LossMemory): a
  // version whose buffer the writer needs is then copied into the shadow, so
  // its frames can still be resent.
  uint64_t loss_memory_ns = 10'000'000'000;
  uint32_t loss_memory_transfers = 16;
  // A replica that assembles nothing and heard no frame for this long while
  // the writer's host lists a newer version than its complete one repeats
  // its ACK: a lost ACK of its last completion would otherwise hold the
  // writer's next version back for a whole retransmission timeout (seconds
  // for a 64 MiB transfer, whose timeout grows with its sending time).
  uint64_t reack_after_ns = 50'000'000;
  // A replica that completed a version and then heard no frame for
  // reack_after_ns repeats that ACK, up to this many times, each after
  // twice the quiet of the one before: when the writer pauses, a lost ACK
  // of its last version would otherwise be found only by a retransmission
  // timeout, which grows to a second under loss (in the replication model
  // at 20-30% loss, 2-3 s until the writer's host knew).
  uint32_t idle_reacks = 3;
  // A replica that accepts no frame and completes no version for this long,
  // while the writer's host lists a version other than its complete one
  // (newer, or older: a forged frame took it ahead), drops what it assembles
  // and its idea of the versions seen and asks for the whole area anew
  // (AreaImport::Resync): no state a frame can put a replica into is
  // permanent. Transfers that progress, however slowly, accept frames;
  // a replica waiting for local readers to free a buffer is not stuck.
  uint64_t resync_after_ns = 2'000'000'000;
  // DATA claiming a version this far beyond the writer host's advertised
  // latest is dropped (directory listings lag by at most their interval; no
  // writer publishes a million versions in that time).
  uint64_t version_slack = 1'000'000;
  // Waiting for a writer to finish the publish it is in before taking its
  // export log (it copies at memory speed: a 64 MiB area takes ~10 ms);
  // longer, and the collect is retried later.
  uint64_t export_wait_ns = 50'000'000;
  // For this long after a replica publishes a version, while local readers
  // still hold the only spare buffer (they move to the new version within
  // microseconds of waking), its daemon looks for the spare again at short
  // intervals (AreaImport::AwaitsSpare): found between versions, the spare
  // is caught up then, not when the next version completes and its readers
  // wait (memif R=1, f=1%: 0.43 ms of the 0.91 ms from publish to visible).
  uint64_t spare_await_ns = 2'000'000;
  // A managed area's budget (dsm_managed_opts.budget_bytes_per_s) accrues
  // for at most this long: a version collected after a pause carries what
  // accrued meanwhile, up to this. Not the sync interval: versions are
  // collected once the hosts acknowledged the last, often a training step
  // (30-40 ms) apart.
  uint64_t managed_burst_ns = 100'000'000;
  // A transfer of at most this many frames goes ahead of the frames queued
  // for the device (net::Destination::urgent), even past send_burst_frames
  // of backlog: one other workers wait for (a step count) is not held up by
  // megabytes of a managed area's lines queued before it.
  uint32_t urgent_max_frames = 2;
  // A replica holds the line bytes of a version it assembles up to this
  // much (ReplicaReceiver::Hold), so that the complete version goes in one
  // short write into the buffer its readers map while they wait for it
  // (ImportHost::BeginInPlace): one store per line, no catch-up of a spare,
  // no remap. Larger versions go straight into a spare.
  size_t hold_max_bytes = 8u << 20;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_SYNC_PARAMS_H_
