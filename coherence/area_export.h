// Everything dsmd decides for one local area that other hosts replicate: when
// to collect a version, when to give the buffer it ships from back to the
// writer, when to copy that version into a shadow of its own, what to send,
// resend and to whom. Pure logic: shared memory, pins and the device are
// reached through ExportHost, frames go out through ExportFrameOut, and time
// is passed in.
//
// Frames are read from the reader buffer of the collected version, which
// stays pinned (no copy). Only when the writer needs that buffer while frames
// of the version may still be sent or asked for are its lines copied into
// the shadow (allocated then) and the pin dropped. Otherwise the pin is
// dropped without a copy, and a receiver that misses frames of that version
// gets what it lacks with the next one (ReplicaSender::OnLostTransfer).
//
// A version the writer hands over in its stage (staged_lines.h) is collected
// from there, before dsmd writes it into a buffer, when it is the one after
// the collected version and nothing else is pending: transfers that carry
// exactly its lines (every host one version behind) are framed from the
// stage's gathered lines, a sequential copy. Other transfers, and resends
// once the stage is given back, wait for the buffer it is written into.
#ifndef DSM_COHERENCE_AREA_EXPORT_H_
#define DSM_COHERENCE_AREA_EXPORT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "coherence/byte_budget.h"
#include "coherence/line_set.h"
#include "coherence/loss_memory.h"
#include "coherence/managed_selection.h"
#include "coherence/replica_sender.h"
#include "coherence/stage_marks.h"
#include "coherence/staged_lines.h"
#include "coherence/sync_params.h"
#include "coherence/wire_format.h"

namespace dsm {

// A version posted in the area's stage as lines, not yet in a buffer.
struct StagedVersion {
  uint64_t version = 0;
  std::span<const LineRun> runs;   // its changed lines, in address order
  const uint8_t* bytes = nullptr;  // their bytes, back to back
};

// What AreaExport needs of the host its writer runs on. Buffers are the
// area's reader buffers by index; -1 is none.
class ExportHost {
 public:
  virtual ~ExportHost() = default;
  // The writer's newest complete version.
  virtual uint64_t LatestVersion() = 0;
  // Moves into `into` the lines the writer's publishes changed since the last
  // take. False while the writer is inside a publish (a later take brings
  // them). `*taken_version`: the newest version whose lines were taken.
  virtual bool TakeChanges(LineSet* into, uint64_t* taken_version) = 0;
  // Adds the lines of publishes not taken yet, leaving them for the next take.
  virtual void AddUntakenChanges(LineSet* into) = 0;
  // Pins the buffer of the newest complete version while `held` stays pinned
  // beside it. False if the writer kept replacing it (nothing new pinned).
  virtual bool PinLatest(int held, int* buffer, uint64_t* version) = 0;
  // Leaves only `buffer` pinned (-1: nothing).
  virtual void SetPin(int buffer) = 0;
  // A buffer's bytes (the area's mapped size, whole lines).
  virtual const uint8_t* Buffer(int buffer) = 0;
  // Whether the writer's last publish found every spare buffer pinned while
  // `pinned` is pinned and is not the latest buffer (so our pin is in its way).
  virtual bool WriterWantsBuffer(int pinned) = 0;
  // Takes the writer's request for a spare buffer (true if there was one).
  virtual bool TakeBufferRequest() = 0;
  // Forgets a request made before the pin just taken (the writer asks again).
  virtual void ClearBufferRequest() = 0;
  // Whether the device still has frames reading lines in place from the
  // pinned buffer, after sending what it can.
  virtual bool TailsInUse() = 0;

  // Staged versions (none where the writer publishes into the buffers).
  // The version posted in the stage as lines and not written yet.
  virtual bool PostedStage(StagedVersion*) { return false; }
  // Claims the posted version: it is written into a buffer without logging
  // its lines for export (the claim has them), that buffer replaces this
  // export's pin, and the stage stays until ReleaseStage (the writer's next
  // version waits).
  virtual void ClaimStage() {}
  // The buffer the claimed version was written into (pinned); false before.
  virtual bool ClaimedStageWritten(int*) { return false; }
  // Gives the stage back. Before the claimed version is written, it is
  // then written as any other (its lines logged, the pin left alone).
  virtual void ReleaseStage() {}
  // The writer waits for the stage to post its next version.
  virtual bool StageWanted() { return false; }

  // Managed areas (AreaExport::SetManaged): as of collected version
  // `version`, lines of published versions not sent yet, and how many
  // collected versions (the ones replicas see) the oldest of them lags. While
  // lines wait, the writer publishes a version even with nothing changed,
  // so that they can go.
  virtual void ManagedResidual(uint64_t /*version*/, uint64_t /*lines*/, uint64_t /*oldest_lag*/) {}
};

// The device, as one area's frames see it.
class ExportFrameOut {
 public:
  virtual ~ExportFrameOut() = default;
  virtual size_t max_frame_bytes() = 0;
  // What seals the frames (the cluster's keys); nullptr: checksums.
  virtual wire::FrameSeal* seal() { return nullptr; }
  // Frames handed over earlier are still waiting for the device.
  virtual size_t backlog() = 0;
  // Starts a frame to `dest` (a host, or wire::kAllHosts: one copy to every
  // host); nullptr if none can be sent now.
  // `urgent`: ahead of the frames queued without it (net::Destination).
  virtual uint8_t* Reserve(uint16_t dest, bool urgent) = 0;
  virtual void Commit(size_t bytes) = 0;
  // Hands over the frame at `reserved`: its first `head_bytes`, then `tail`.
  // `in_place`: the tail lies in the pinned buffer and may be read there
  // where the device can (TailsInUse then holds the pin); otherwise (the
  // shadow, which may change before the device sends) it is copied.
  virtual void CommitWithTail(uint8_t* reserved, size_t head_bytes, std::span<const uint8_t> tail,
                              bool in_place) = 0;
};

// What AreaExport did, for dsmctl (added to, never reset).
struct ExportCounters {
  uint64_t data_frames_out = 0;
  uint64_t data_bytes_out = 0;     // frame bytes (UDP payload) of DATA frames
  uint64_t changed_bytes_out = 0;  // line bytes the transfers carried
  uint64_t transfers_sent = 0;
  uint64_t retransmitted_frames = 0;
  uint64_t versions_collected = 0;
  uint64_t versions_shadowed = 0;  // copied into the shadow for the writer's sake
  uint64_t pins_yielded = 0;       // given back to the writer uncopied
  uint64_t versions_from_stage = 0;  // collected from the writer's stage
  uint64_t frames_from_stage = 0;    // DATA frames framed from it
  // Managed areas: changed lines that waited past their version's collect,
  // lines sent because of their lag, and their bytes beyond the budget.
  uint64_t managed_lines_deferred = 0;
  uint64_t managed_due_lines = 0;
  uint64_t managed_over_budget_bytes = 0;
};

// How a managed area's versions are sent (AreaExport::SetManaged).
struct ManagedExport {
  ManagedParams selection;
  // Line bytes per second each replica may be sent, in bursts of at most
  // `burst_bytes`.
  uint64_t bytes_per_second = 0;
  uint64_t burst_bytes = 0;
};

class AreaExport {
 public:
  // `header`: what every DATA frame of this area carries (source host, area
  // index and generation). `area_bytes`: the area's size; `mapped_bytes` what
  // a buffer holds (whole lines). `shared_transfers`: one transfer may serve
  // several hosts (multicast).
  AreaExport(size_t area_bytes, size_t mapped_bytes, bool shared_transfers,
             const wire::Header& header, const SyncParams& params, ExportHost* host,
             ExportFrameOut* out, ExportCounters* counters);

  // Receivers.
  void Subscribe(uint16_t host);
  void Unsubscribe(uint16_t host);
  bool subscribed(uint16_t host) const { return sender_.subscribed(host); }
  // Membership says `host` is down or up again (ReplicaSender::SetHostUp).
  void SetHostUp(uint16_t host, bool up) { sender_.SetHostUp(host, up); }
  // An ACK from `host`: its complete version (`holds_nothing`: none yet),
  // and the frames it misses of transfer `transfer_id` of version
  // `assembling_version`, which are resent if that version is still here.
  void OnAck(uint16_t host, uint64_t complete_version, bool holds_nothing,
             uint64_t assembling_version, uint32_t transfer_id,
             std::span<const wire::SeqRange> missing, uint64_t now_ns);

  // One turn: gives the writer its buffer back if it needs it, collects the
  // newest version when the hosts are ready for it, frames what is due.
  // Returns whether anything happened.
  bool Turn(uint64_t now_ns);
  // Whether Turn has something to do now: the loop's last look before it sleeps.
  bool Due(uint64_t now_ns);

  // The area was freed: nothing is sent any more, and its buffers are gone
  // (no pin to drop).
  void AreaFreed();
  // dsmd stops: lets go of the pinned buffer, so the writer keeps publishing.
  void ReleasePin();

  // Where the end of each stage of a version is marked (nullptr: nowhere).
  void set_stage_marks(StageMarks* marks) { marks_ = marks; }

  // Sends the area managed (managed_selection.h): from the next collect on,
  // a version carries the lines its selection chooses within the budget
  // (its first collect carries every line), and the others wait. A line's
  // lag counts the versions collected, the ones replicas see: versions the
  // writer published between two collects are one to them. Versions are
  // collected from a buffer, never framed from the stage.
  void SetManaged(const ManagedExport& managed, uint64_t now_ns);
  bool managed() const { return managed_ != nullptr; }
  const ManagedSelection* managed_selection() const { return managed_.get(); }

  // The newest version every subscribed host that is up holds (MinAcked).
  uint64_t MinAcked() const { return sender_.MinAcked(); }
  const ReplicaSender& sender() const { return sender_; }
  int pinned() const { return pinned_; }

 private:
  // The shadow moves on only between transfers, and not while a receiver may
  // still ask for missing frames of one (at most this long after sending).
  uint64_t CollectHoldNs() const { return std::max(rto_ns_, params_.retransmit_timeout_ns); }
  // Takes the writer's changes and pins the newest version: when the writer
  // published since the last collect, or when nothing holds the collected
  // version (`source_lost_`) and a host needs a transfer of it.
  bool Collect(uint64_t now_ns);
  // What a managed area's collect of `version` carries: the selection's
  // choice among the changes in pending_ and the lines still waiting.
  const LineSet& SelectManaged(uint64_t version, uint64_t now_ns);
  // Collects the version posted in the stage, if it is the next one and
  // nothing else changed since the collected version.
  bool CollectStaged(uint64_t now_ns);
  // Learns the buffer the claimed version went to (it is pinned), and gives
  // the stage back once no frame is due from it.
  void FollowStage(uint64_t now_ns);
  // Lets go of the stage; if its version is not in a buffer yet, nothing
  // holds the collected version any more (source_lost_).
  void AbandonStage();
  // Whether frames of `t` can be read from the stage: it carries exactly
  // the claimed version's lines.
  bool FromStage(const Transfer& t) const;
  // The claimed version waits to be written: no frame that needs a buffer
  // can be read yet.
  bool AwaitingStageWrite() const { return staged_ && !stage_written_; }
  // Where frames of the collected version are read from: its pinned buffer,
  // or the shadow once Unpin copied it there.
  const uint8_t* FrameSource();
  // Whether frames may read their lines in place from the pinned buffer.
  bool FramesInPlace();
  // Copies what the shadow lacks of the collected version from the pinned
  // buffer and drops the pin.
  void Unpin();
  // The writer needs the pinned buffer: drops the pin, copying the version
  // into the shadow only if frames of it may still be sent or asked for.
  void YieldPin(uint64_t now_ns);
  // Drops the pin without a copy: no transfer of the collected version can
  // be framed or resent until the next collect.
  void DropPin();
  bool ContinueSend(uint64_t now_ns);
  // Empties sent_ (its line sets go back to the sender's pool).
  void ForgetSent();
  // Sends frames receivers reported missing, as many as the device takes this
  // turn; drops what no longer has its transfer here (the host's next
  // transfer brings those lines, ReplicaSender::OnLostTransfer).
  bool ContinueResends(uint64_t now_ns);
  wire::Header DataHeader(const Transfer& t, uint16_t dest) const;
  // Marks `stage` of the transfer being sent, for its host (or all hosts).
  void MarkSending(Stage stage);

  size_t area_bytes_;
  size_t mapped_bytes_;
  wire::Header header_;
  SyncParams params_;
  ExportHost* host_;
  ExportFrameOut* out_;
  ExportCounters* counters_;
  StageMarks* marks_ = nullptr;
  ReplicaSender sender_;
  LossMemory loss_;  // receivers reported missing frames

  bool freed_ = false;
  bool collected_once_ = false;
  LineSet pending_;  // taken from the writer, not yet collected
  // Managed areas: the selection, its budget, and what it chose to collect.
  std::unique_ptr<ManagedSelection> managed_;
  std::unique_ptr<ByteBudget> budget_;
  LineSet selected_;
  uint64_t managed_collects_ = 0;  // versions collected: the selection's versions
  int pinned_ = -1;  // the buffer of the collected version, while pinned
  uint64_t pinned_version_ = 0;
  std::vector<uint8_t> shadow_;  // allocated at the first Unpin
  LineSet shadow_stale_;         // lines to copy into the shadow from the collected version
  // The pin was given back before the shadow had the version: no transfer of
  // it can be framed any more; the next collect starts over.
  bool source_lost_ = false;

  // The transfer being handed to the device (frames may not all fit at once).
  Transfer sending_;
  wire::DataFrameWriter::Plan plan_;
  uint32_t next_seq_ = 0;
  uint32_t frame_count_ = 0;
  bool in_send_ = false;
  uint64_t send_started_ns_ = 0;
  // Retransmission timeout: grows with the time a transfer takes to send, so
  // a large version is not resent while its receivers still take it in.
  uint64_t rto_ns_ = 0;
  // The collected version was claimed from the stage and the stage is still
  // held (`stage_`); `stage_written_`: it is in `pinned_` now.
  bool staged_ = false;
  bool stage_written_ = false;
  StagedVersion stage_;
  std::shared_ptr<const LineSet> stage_lines_;  // its lines (the sender's collected set)
  // Its framing, made once for every transfer from the stage.
  wire::DataFrameWriter::Plan stage_plan_;
  bool sending_from_stage_ = false;  // sending_ carries exactly the stage's lines

  // Transfers of the collected version (with their framing), by id, for
  // resending frames a receiver reports missing. Emptied when it changes.
  std::map<uint32_t, std::pair<Transfer, wire::DataFrameWriter::Plan>> sent_;
  // Frames a host reported missing and that are not resent yet, as a set of
  // seqs of one transfer: a report that repeats frames still queued (the
  // host's NACK came before their resend) adds nothing. A report of another
  // transfer replaces the set.
  struct Resends {
    uint32_t transfer_id = 0;
    std::vector<uint64_t> seqs;  // bit per frame
    uint32_t next = 0;           // no bit below this is set
    uint32_t queued = 0;
  };
  std::map<uint16_t, Resends> resends_;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_AREA_EXPORT_H_
