// dsmd's remote sync: replicates this host's areas to the hosts that attach
// them and keeps local replicas of other hosts' areas, over net::Transport.
// Runs on the daemon's single thread, one Poll() per loop turn.
//
// Files by concern: remote_sync.cpp (loop, timers, frame decode and
// dispatch), remote_export.cpp (this host's areas -> other hosts: AreaExport
// in coherence/ decides, ShmExportHost in export_host.h reaches shared memory
// and the transport for it), remote_replica.cpp (other hosts' areas -> here:
// AreaImport decides, ShmImportHost in import_host.h reaches shared memory),
// remote_membership.cpp (hosts confirmed by hello, up, down, restarted),
// remote_directory.cpp (heartbeat and directory frames, replicas retired when
// their origin is gone).
#ifndef DSM_DAEMON_REMOTE_SYNC_H_
#define DSM_DAEMON_REMOTE_SYNC_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coherence/area_export.h"
#include "coherence/area_import.h"
#include "coherence/directory_rounds.h"
#include "coherence/membership.h"
#include "coherence/wire_format.h"
#include "daemon/area_directory.h"
#include "daemon/cluster_config.h"
#include "daemon/daemon_config.h"
#include "daemon/export_host.h"
#include "daemon/import_host.h"
#include "daemon/key_file.h"
#include "daemon/stage_timeline.h"
#include "daemon/tunables.h"
#include "net/transport.h"

namespace dsm {

class RemoteSync {
 public:
  RemoteSync(const DaemonConfig& config, const ClusterConfig& cluster, ControlSegment* segment,
             AreaDirectory* directory, uint8_t* backing_base);
  ~RemoteSync();

  // Opens the DPDK port. On failure `error` says why.
  bool Start(std::string* error);
  // Runs over `transport` instead (tests: net/memory_transport.h), with the
  // cluster file's other hosts as peers and dsmd's fault flags around it.
  bool Start(std::unique_ptr<net::Transport> transport, std::string* error);
  // One turn: receive, act on timers, send. Returns whether anything happened
  // (frames in or out), for adaptive polling.
  bool Poll(uint64_t now_ns);
  // The transport's descriptor that polls readable while frames wait
  // (net::Transport::rx_wake_fd), or -1: dsmd then wakes on a timer to look.
  int rx_wake_fd() const { return transport_ ? transport_->rx_wake_fd() : -1; }

  // Whether frames flowed recently: the loop then sleeps only briefly when idle,
  // since the next frame or version is likely close.
  bool RecentlyActive(uint64_t now_ns) const { return now_ns - last_activity_ns_ < kActiveWindowNs; }
  // Whether no replication traffic flowed for a long while (kDeepIdleAfterNs).
  bool LongIdle(uint64_t now_ns) const { return now_ns - last_activity_ns_ >= kDeepIdleAfterNs; }
  // When this host next sends a heartbeat or its listing (the timers a long
  // idle daemon has; frames from peers wake it through rx_wake_fd).
  uint64_t NextAnnouncementNs() const {
    return AnyExportLive() ? std::min(next_heartbeat_ns_, next_directory_ns_) : next_heartbeat_ns_;
  }

  // Whether a local writer published a version that the next turn would collect
  // and ship: the loop's last look before it sleeps with the doorbell armed.
  bool ExportDue(uint64_t now_ns) const;
  // While a replica waits for local readers to leave its next spare
  // (AreaImport::AwaitsSpare), how long the loop may sleep: as long as the
  // wait lasted so far, at least kSpareAwaitPollNs (a few wakes per version
  // even for readers that keep the spare for the whole wait). 0: no replica
  // waits.
  uint64_t SpareAwaitSleepNs(uint64_t now_ns) const;
  // Whether a replica has a timer that may come due within about a
  // millisecond (AreaImport::AwaitsPromptTimer). Exports' timers are at
  // least SyncParams::retransmit_timeout_ns away.
  bool ReplicaAwaitsPromptTimer() const;

  // Control plane: a local client asks for `name`, which is not a local area.
  // Starts replicating it if another host has it. Returns a message for the
  // client while the replica is not ready ("" if no host has that name);
  // `status` stays DSM_ERR_NOT_FOUND (the client asks again), or says why
  // the replica cannot be made here at all (DSM_ERR_NO_SPACE: fail at once).
  std::string RequestReplica(const std::string& name, uint64_t now_ns, int* status);

  // dsmd stops: lets go of the buffers it ships from, so writers keep publishing.
  void ReleasePins();
  // Where local areas' staged versions are written: their exports frame from
  // the stage first (AreaExport::CollectStaged).
  void set_stages(const StageAppliers* stages) { stages_ = stages; }

  // Drops the queued frames that read a freed area's lines (its memory went
  // back to the host, or to a new area): the control plane calls it after
  // each request that may free one, before anything can flush; Poll first.
  void DropTailsOfFreedExports();

 private:
  // An area of this host that other hosts replicate: AreaExport decides,
  // ShmExportHost reaches its memory and the transport for it.
  struct ExportedArea {
    uint32_t index = 0;
    uint32_t generation = 0;
    uint32_t reader_slot = 0;  // the daemon pins the version it ships
    std::unique_ptr<ShmExportHost> host;
    std::unique_ptr<StageMarks> marks;
    std::unique_ptr<AreaExport> area;
  };
  // Another host's area replicated here: AreaImport decides, ShmImportHost
  // reaches its memory and sends its acks.
  struct Replica {
    uint32_t local_index = 0;
    uint32_t local_generation = 0;  // of the local slot: a freed slot may be reused
    uint16_t origin_host = 0;
    uint32_t origin_index = 0;
    uint32_t origin_generation = 0;
    std::string name;
    std::unique_ptr<ShmImportHost> host;
    std::unique_ptr<StageMarks> marks;
    std::unique_ptr<AreaImport> area;
    uint64_t subscribed_ns = 0;
    uint64_t writer_gone_since_ns = 0;  // 0: its writer is alive, as last heard
  };
  struct RemoteEntry {
    wire::DirectoryEntry entry;
    uint64_t heard_ns;
  };

  // remote_sync.cpp
  // Reads the key file (the cluster's keys) into seal_; false and `error`
  // if it cannot be used (the keys stay as they were).
  bool LoadKeys(std::string* error);
  void Receive(std::span<const uint8_t> bytes, uint16_t source_host, uint64_t now_ns);
  void Drop(wire::DropReason r);
  // Copies membership state (each heartbeat) and the transport's counters
  // (each turn) into the control segment.
  void PublishState();
  void PublishTransportCounters();
  uint8_t* Reserve(net::Destination dest);
  void SendSmall(net::Destination dest, wire::FrameType type, uint32_t area_index,
                 uint32_t area_generation, uint64_t version, uint64_t base, uint16_t flags,
                 uint32_t transfer_id, std::span<const uint8_t> body);
  // Sends `h` (from MakeHeader, fields filled in) with `body` to `dest`.
  void SendFrame(net::Destination dest, wire::Header h, std::span<const uint8_t> body);
  wire::Header MakeHeader(wire::FrameType type) const;

  // remote_export.cpp
  void OnSubscribe(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  void OnAck(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  bool ExportTurn(ExportedArea& e, uint64_t now_ns);
  // Whether `e`'s area is still the one exported (not freed, slot not reused).
  bool ExportLive(const ExportedArea& e) const;
  // Another host holds (or held) a replica of an area here that is still
  // live: its staleness needs the frequent listings (kDirectoryIntervalNs).
  bool AnyExportLive() const;

  // remote_replica.cpp
  void OnData(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  void SendAck(const Replica& r, const AckReport& ack);
  Replica* FindReplica(uint16_t host, uint32_t index, uint32_t generation);
  // Forgets replicas whose local slot was freed (the replica was sealed and
  // its name reused, or dsmd dropped it), and tells their origins.
  void DropFreedReplicas();
  // The origin area of replicas_[i] is gone for good (see
  // AreaDirectory::RetireReplica): no frame reaches it any more.
  void RetireReplica(size_t i, bool freed, const char* why);

  // remote_membership.cpp
  // Whether a frame from `host` comes from the incarnation believed; if not,
  // asks the host with a HELLO and the frame is dropped.
  bool Admit(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  void OnHello(const wire::Frame& f, uint16_t host);
  void OnHelloReply(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  void OnMembershipEvent(uint16_t host, Membership::Event e);
  void OnHostUp(uint16_t host);
  void OnHostDown(uint16_t host);
  // A new incarnation of `host`: its subscriptions and its areas are gone.
  void OnHostRestarted(uint16_t host);

  // remote_directory.cpp
  void SendHeartbeat(uint64_t now_ns);
  // `lazy`: an unchanged listing nobody's staleness waits for (it goes
  // with the heartbeat), sent without waking the peers (Destination::lazy).
  void SendDirectory(uint64_t now_ns, bool lazy);
  // A heartbeat: the host is alive (admitting it said so) and uses this much region.
  void OnHeartbeat(const wire::Frame& f, uint16_t host);
  void OnDirectory(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  // Which replicas here local clients find by a name the frame lists.
  void FollowNames(const wire::Frame& f, uint16_t host);
  // `host` listed exactly `areas` in a whole round: its replicas here whose
  // origin is not among them were freed there.
  void OnWholeListing(uint16_t host, const std::set<DirectoryRounds::AreaId>& areas);
  // `entry` of `host` is a live area: a replica here that holds its name
  // for an area whose writer is gone gives the name up.
  void RetireReplicasNamedLike(const wire::DirectoryEntry& entry, uint16_t host, uint64_t now_ns);
  // Whether a replica's writer is alive (its host's listing, membership),
  // for local readers and for how long it has been gone.
  void SetWriterAlive(Replica& r, bool alive, uint64_t now_ns);

  DaemonConfig config_;
  ClusterConfig cluster_;
  ControlSegment* segment_;
  AreaDirectory* directory_;
  uint8_t* backing_;
  RemoteCounters& stats_;  // in the control segment, for dsmctl
  uint32_t incarnation_;  // drawn at start, never 0
  SyncParams params_;
  ExportCounters export_counters_;  // of every export, copied into stats_ each turn
  ImportCounters import_counters_;  // of every replica, likewise
  std::unique_ptr<net::Transport> transport_;
  StageTimelineWriter timeline_;  // into segment_->timeline
  std::unique_ptr<Membership> membership_;
  std::map<uint32_t, ExportedArea> exports_;  // by local area index
  const StageAppliers* stages_ = nullptr;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::map<uint16_t, std::map<std::string, RemoteEntry>> remote_dir_;  // by host, then name
  DirectoryRounds listings_;  // other hosts' directory rounds
  uint64_t directory_round_ = 0;  // of this host's listing
  uint64_t next_heartbeat_ns_ = 0;
  uint64_t last_poll_ns_ = 0;
  bool expire_due_ = false;  // a heartbeat interval passed: judge silent hosts
  uint64_t last_activity_ns_ = 0;  // last DATA or ACK in or out
  bool replication_frames_in_ = false;  // DATA or ACK received this turn
  size_t small_frames_out_ = 0;  // frames SendFrame queued this turn (not DATA)
  uint64_t next_directory_ns_ = 0;
  wire::FrameSeal seal_;  // the cluster's keys, or checksums
  std::unique_ptr<FileChangeWatch> key_file_watch_;
  uint64_t next_key_check_ns_ = 0;
  uint64_t last_directory_ns_ = 0;
  uint64_t listing_changes_sent_ = 0;  // directory_->listing_changes() at the last round
};

}  // namespace dsm

#endif  // DSM_DAEMON_REMOTE_SYNC_H_
