// State in the control segment that dsmd alone writes, for dsmctl and tests:
// its remote-sync counters and what it knows of the cluster's hosts. Clients
// never read it (ControlHeader embeds it, shm_layout.h).
#ifndef DSM_LIBDSM_CONTRACT_DAEMON_STATE_H_
#define DSM_LIBDSM_CONTRACT_DAEMON_STATE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace dsm {

// dsmd's remote-sync counters, written by dsmd alone and read by dsmctl and
// tests (plain fields: a reader may see a count one update late, never garbage
// that matters).
inline constexpr size_t kDropReasonSlots = 24;
struct RemoteCounters {
  uint64_t frames_in;
  uint64_t dropped[kDropReasonSlots];  // by wire::DropReason
  uint64_t data_frames_out;
  uint64_t data_bytes_out;     // UDP payload bytes of DATA frames
  uint64_t changed_bytes_out;  // line bytes those frames carried
  uint64_t transfers_sent;
  uint64_t retransmitted_frames;
  uint64_t versions_collected;
  uint64_t versions_received;
  uint64_t acks_out;
  uint64_t acks_in;
  uint64_t tx_frames;
  uint64_t tx_bytes;
  uint64_t tx_dropped;
  uint64_t rx_frames;
  uint64_t rx_dropped_malformed;
  uint64_t rx_dropped_not_for_us;
  uint64_t rx_dropped_unknown_source;
  uint64_t faults_injected;
  uint64_t loop_turns;
  uint64_t idle_sleeps;
  uint64_t rx_bytes;  // Ethernet frame bytes received (as tx_bytes)
  uint64_t versions_received_in_place;  // of versions_received: frames written
                                        // straight into a reader buffer (no staging copy)
  uint64_t versions_shadowed;  // of versions_collected: copied into dsmd's shadow because
                               // the writer needed the buffer frames were read from
  uint64_t pins_yielded;  // versions whose buffer the writer needed once all frames
                          // were out: given back uncopied (missing frames then come
                          // with the next version, not as resends)
  uint64_t tx_tail_frames;  // frames whose lines the device read in place from the
                            // pinned buffer (not copied into the frame first)
  uint64_t replica_resyncs;  // replicas that made no progress while their writer's host
                             // listed another version, and asked for the whole area anew
  uint64_t signing_key_id;  // the key frames are sealed with (0: no keys, checksums)
  uint64_t keys_held;       // keys accepted on frames received
  uint64_t key_reloads;     // times the key file was read again after a change
  uint64_t versions_from_stage;  // of versions_collected: framed from the writer's stage
                                 // before dsmd wrote them into a buffer
  uint64_t frames_from_stage;    // of data_frames_out: their lines read from the stage
  // Managed areas (ExportCounters): lines left waiting, summed over collects;
  // lines sent because of their lag; their bytes beyond the budget.
  uint64_t managed_lines_deferred;
  uint64_t managed_due_lines;
  uint64_t managed_over_budget_bytes;
  uint64_t versions_received_forward;  // of versions_received_in_place: their frames also
                                       // wrote the buffer the next version goes to
  uint64_t versions_written_in_place;  // of versions_received: held until complete, then
                                       // written into the latest buffer while readers waited
};

// What dsmd knows of each host of the cluster.
struct HostInfo {
  uint32_t in_cluster;  // listed in the cluster file
  uint32_t up;
  uint64_t last_heard_ns;  // CLOCK_MONOTONIC of this host
  uint32_t incarnation;    // of its dsmd, as believed here (0: not heard yet)
  uint32_t reserved;
  uint64_t region_used_bytes;  // its backing in use, from its last heartbeat
  uint64_t region_bytes;
};

// One moment of a version's way through dsmd: the end of a stage
// (coherence/stage_marks.h), for `dsmctl timeline` and dsm-bench.
struct TimelineEvent {
  uint64_t t_ns;  // CLOCK_MONOTONIC (one clock for every namespace of a machine)
  uint64_t version;
  uint32_t origin_index;  // the area, as its writer's host knows it
  uint32_t origin_generation;
  uint16_t origin_host;
  uint16_t peer;  // export stages: the transfer's host (0xffff: every host); import: the origin
  uint8_t stage;  // dsm::Stage
  uint8_t reserved[3];
};

// The newest kTimelineEvents marks, a ring dsmd alone writes: event i (of
// `written` ever written) sits at i % kTimelineEvents and is complete once
// `written` exceeds i (release). A reader copies, then loads `written` again
// and keeps only the events not overwritten meanwhile.
inline constexpr size_t kTimelineEvents = size_t{1} << 16;
struct StageTimeline {
  std::atomic<uint64_t> written;
  TimelineEvent events[kTimelineEvents];
};

}  // namespace dsm

#endif  // DSM_LIBDSM_CONTRACT_DAEMON_STATE_H_
