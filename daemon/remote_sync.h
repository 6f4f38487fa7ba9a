// dsmd's remote sync: replicates this host's areas to the hosts that attach
// them and keeps local replicas of other hosts' areas, over net::Transport.
// Runs on the daemon's single thread, one Poll() per loop turn.
//
// Files by concern: remote_sync.cpp (loop, timers, frame dispatch),
// remote_export.cpp (our areas -> other hosts), remote_replica.cpp (other
// hosts' areas -> here), remote_directory.cpp (directory and membership frames).
#ifndef DSM_DAEMON_REMOTE_SYNC_H_
#define DSM_DAEMON_REMOTE_SYNC_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coherence/loss_memory.h"
#include "coherence/membership.h"
#include "coherence/replica_receiver.h"
#include "coherence/replica_sender.h"
#include "coherence/version_publisher.h"
#include "coherence/wire_format.h"
#include "daemon/area_directory.h"
#include "daemon/cluster_config.h"
#include "daemon/daemon_config.h"
#include "daemon/export_log_reader.h"
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
  // One turn: receive, act on timers, send. Returns whether anything happened
  // (frames in or out), for adaptive polling.
  bool Poll(uint64_t now_ns);

  // Whether frames flowed recently: the loop then sleeps only briefly when idle,
  // since the next frame or version is likely close.
  bool RecentlyActive(uint64_t now_ns) const { return now_ns - last_activity_ns_ < kActiveWindowNs; }

  // Whether a local writer published a version that the next turn would collect
  // and ship: the loop's last look before it sleeps with the doorbell armed.
  bool ExportDue(uint64_t now_ns) const;

  // Control plane: a local client asks for `name`, which is not a local area.
  // Starts replicating it if another host has it. Returns a message for the
  // client while the replica is not ready ("" if no host has that name).
  std::string RequestReplica(const std::string& name, uint64_t now_ns);

  // dsmd stops: lets go of the buffers it ships from, so writers keep publishing.
  void ReleasePins();

  // Drops the queued frames that read a freed area's lines (its memory went
  // back to the host, or to a new area): the control plane calls it after
  // each request that may free one, before anything can flush; Poll first.
  void DropTailsOfFreedExports();

 private:
  // An area of this host that other hosts replicate.
  struct ExportedArea {
    uint32_t index = 0;
    uint32_t generation = 0;
    uint32_t reader_slot = 0;  // the daemon pins the version it ships
    std::unique_ptr<ReplicaSender> sender;
    // Frames are read from the reader buffer of the collected version, which
    // dsmd keeps pinned (`pinned`), so no copy is made. Only when the writer
    // needs that buffer while frames of the version are still to be sent are
    // its lines copied into the shadow (allocated then, line rounded) and the
    // pin dropped. `shadow_stale`: lines where the shadow differs from the version.
    int pinned = -1;
    uint64_t pinned_version = 0;
    // Frames sent with their lines read in place from the pinned buffer (no
    // copy into the frame; nullptr where the device cannot): the pin stays
    // until the device is done with them (TailsInUse).
    std::unique_ptr<net::TailHold> tails;
    std::vector<uint8_t> shadow;
    std::unique_ptr<LineSet> shadow_stale;
    // The pin was yielded to the writer before the shadow had the version:
    // no transfer of it can be framed any more; the next collect starts over.
    bool source_lost = false;
    LossMemory loss{kLossMemoryNs, kLossMemoryTransfers};  // receivers reported missing frames
    std::unique_ptr<ExportLogReader> logs;  // what the writer's publishes changed
    bool collected_once = false;
    std::unique_ptr<LineSet> pending;  // taken from the export logs, not yet shipped
    // The transfer being handed to the transport (frames may not all fit at once).
    Transfer sending;
    uint32_t next_seq = 0;
    uint32_t frame_count = 0;
    bool in_send = false;
    uint64_t send_started_ns = 0;
    // Retransmission timeout: grows with the time a transfer takes to send, so
    // a large version is not resent while its receivers are still taking it in.
    uint64_t rto_ns = 0;
    wire::DataFrameWriter::Plan plan;  // framing of `sending`
    // Transfers of the shadow's current version (with their framing), by id, for
    // resending frames a receiver reports missing. Emptied when the shadow moves.
    std::map<uint32_t, std::pair<Transfer, wire::DataFrameWriter::Plan>> sent;
  };
  // Another host's area replicated here.
  struct Replica {
    uint32_t local_index = 0;
    uint32_t local_generation = 0;  // of the local slot: a freed slot may be reused
    uint16_t origin_host = 0;
    uint32_t origin_index = 0;
    uint32_t origin_generation = 0;
    std::string name;
    bool named = false;  // attachable by local clients
    std::unique_ptr<ReplicaReceiver> receiver;
    std::unique_ptr<VersionPublisher> publisher;
    // The reader buffer that will hold the next version, which frames are
    // written into directly; -1: none was free, frames go to the staging copy
    // and are copied from there when the version is published.
    int target = -1;
    uint64_t subscribed_ns = 0;
    uint64_t last_ack_ns = 0;
  };
  struct RemoteEntry {
    wire::DirectoryEntry entry;
    uint64_t heard_ns;
  };

  // remote_sync.cpp
  void Receive(std::span<const uint8_t> bytes, uint16_t source_host, uint64_t now_ns);
  void Drop(wire::DropReason r);
  // Copies membership state (each heartbeat) and the transport's counters
  // (each turn) into the control segment.
  void PublishState();
  void PublishTransportCounters();
  uint8_t* Reserve(net::Destination dest);
  void SendSmall(net::Destination dest, wire::FrameType type, uint32_t area_index,
                 uint32_t area_generation, uint64_t version, uint64_t base, uint32_t flags,
                 uint32_t transfer_id, std::span<const uint8_t> body);
  wire::Header MakeHeader(wire::FrameType type) const;

  // remote_export.cpp
  // The shadow moves on only between transfers, and not while a receiver may
  // still ask for missing frames of one (at most this long after sending).
  static uint64_t CollectHoldNs(const ExportedArea& e) { return std::max(e.rto_ns, kRetransmitTimeoutNs); }
  void OnSubscribe(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  void OnAck(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  bool ExportTurn(ExportedArea& e, uint64_t now_ns);
  // Consumes the export logs and pins the newest version: when the writer
  // published since the last collect, or when nothing holds the collected
  // version (`source_lost`) and a host needs a transfer of it.
  bool Collect(ExportedArea& e, uint64_t now_ns);
  // Where frames of the collected version are read from: its pinned reader
  // buffer, or the shadow once Unpin copied it there.
  const uint8_t* FrameSource(const ExportedArea& e) const;
  // The hold for frames read from FrameSource: only a pinned buffer is sent
  // from in place (the shadow is copied into frames, as it may be freed).
  net::TailHold* FrameTails(const ExportedArea& e) const {
    return e.pinned >= 0 ? e.tails.get() : nullptr;
  }
  // Whether frames still read from the pinned buffer after a flush: the pin
  // must not move (nor the writer get the buffer) until they are sent.
  bool TailsInUse(ExportedArea& e);
  // Whether the writer's last publish found no free buffer while we pin one
  // that is not the latest.
  bool WriterWantsPinned(const ExportedArea& e) const;
  // Copies what the shadow lacks of the collected version from the pinned
  // buffer and drops the pin, so the writer can reuse that buffer.
  void Unpin(ExportedArea& e);
  // The writer needs the pinned buffer: drops the pin, copying the version
  // into the shadow only if frames of it may still be sent or asked for.
  void YieldPin(ExportedArea& e, uint64_t now_ns);
  // Drops the pin without a copy: no transfer of the collected version can be
  // framed or resent until the next collect.
  void DropPin(ExportedArea& e);
  // Whether `e`'s area is still the one exported (not freed, slot not reused).
  bool ExportLive(const ExportedArea& e) const;
  bool ContinueSend(ExportedArea& e, uint64_t now_ns);
  void ForgetHostSubscriptions(uint16_t host);

  // remote_replica.cpp
  void OnData(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  bool ReplicaTurn(Replica& r, uint64_t now_ns);
  void SendAck(Replica& r, uint64_t now_ns);
  void PublishReplica(Replica& r, uint64_t now_ns);
  // Between versions: points the receiver at a free reader buffer, or at the
  // staging copy when local readers pin every spare (never at the latest).
  // `catch_up`: also bring that buffer up to the latest version now (between
  // versions; not when a frame of the next one is already waiting).
  void AimReplica(Replica& r, bool catch_up);
  // Something arrived from `host` (a heartbeat gives its incarnation, other
  // frames 0): tells membership, and acts on the host coming up or restarting.
  void HeardFrom(uint16_t host, uint64_t incarnation, uint64_t now_ns);
  void OnHostUp(uint16_t host);
  void OnHostDown(uint16_t host);
  void OnHostRestarted(uint16_t host);
  Replica* FindReplica(uint16_t host, uint32_t index, uint32_t generation);
  // Forgets replicas whose local slot was freed (the replica was sealed and
  // its name reused, or dsmd dropped it), and tells their origins.
  void DropFreedReplicas();

  // remote_directory.cpp
  void SendHeartbeat(uint64_t now_ns);
  void SendDirectory(uint64_t now_ns);
  void OnHeartbeat(const wire::Frame& f, uint16_t host, uint64_t now_ns);
  void OnDirectory(const wire::Frame& f, uint16_t host, uint64_t now_ns);

  DaemonConfig config_;
  ClusterConfig cluster_;
  ControlSegment* segment_;
  AreaDirectory* directory_;
  uint8_t* backing_;
  RemoteCounters& stats_;  // in the control segment, for dsmctl
  uint64_t incarnation_;
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<Membership> membership_;
  std::map<uint32_t, ExportedArea> exports_;  // by local area index
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::map<uint16_t, std::map<std::string, RemoteEntry>> remote_dir_;  // by host, then name
  uint64_t next_heartbeat_ns_ = 0;
  uint64_t last_poll_ns_ = 0;
  bool expire_due_ = false;  // a heartbeat interval passed: judge silent hosts
  uint64_t last_activity_ns_ = 0;  // last DATA or ACK in or out
  uint64_t next_directory_ns_ = 0;

};

}  // namespace dsm

#endif  // DSM_DAEMON_REMOTE_SYNC_H_
