// Everything dsmd decides for one replica of another host's area: where the
// frames of the next version go, when a version is complete and published to
// local readers, what a buffer that missed versions copies, and when to tell
// the writer's host where the replica is (ACK) or what it lacks (NACK). Pure
// logic: the replica's buffers, local readers' pins, publishing and the way
// back to the writer's host are reached through ImportHost; time is passed in.
//
// On a host that can (ImportHost::InPlaceCapable), the lines of a version up
// to SyncParams::hold_max_bytes are held until it is complete, then written
// in one go into the latest buffer if every local reader mapping it waits
// for a newer version (ImportHost::BeginInPlace), else into a spare. Other
// versions' frames go straight into a spare reader buffer when one is free
// (no copy at publish), else into the staging copy, which is copied into a
// spare once local readers free one. The latest buffer changes between
// publishes only while no local reader can read it.
#ifndef DSM_COHERENCE_AREA_IMPORT_H_
#define DSM_COHERENCE_AREA_IMPORT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "coherence/replica_receiver.h"
#include "coherence/stage_marks.h"
#include "coherence/sync_params.h"
#include "coherence/version_publisher.h"
#include "coherence/wire_format.h"

namespace dsm {

// What a replica tells the writer's host: its complete version, and the
// frames it misses of the transfer it assembles.
struct AckReport {
  uint64_t complete_version = 0;
  bool holds_nothing = false;  // no complete version yet: not an ack of version 0
  uint64_t assembling_version = 0;
  uint32_t transfer_id = 0;
  std::span<const wire::SeqRange> missing;
};

// What AreaImport needs of the host the replica lives on. Buffers are the
// replica's reader buffers by index; -1 is the staging copy.
class ImportHost {
 public:
  virtual ~ImportHost() = default;
  // A buffer local readers do not pin, other than the latest, for frames of
  // the next version; -1 if they pin every spare.
  virtual int SpareForNextVersion() = 0;
  // The same when a staged version is to be published; -1 makes the publish
  // wait (AreaImport::Turn retries).
  virtual int SpareToPublish() = 0;
  // Another such buffer besides `buffer` (the one frames go to), for the
  // version after: the one a round-robin pick goes to next; -1 if none.
  virtual int SpareBesides(int buffer) = 0;
  // The buffer local readers see (the latest version's).
  virtual uint32_t Latest() = 0;
  // A buffer's bytes (the area's mapped size, whole lines).
  virtual uint8_t* Buffer(int buffer) = 0;
  // Makes `buffer` the latest, holding `version`, for local readers;
  // `bytes_copied` were written for it.
  virtual void Publish(uint32_t buffer, uint64_t version, size_t bytes_copied,
                       uint64_t now_ns) = 0;
  // `bytes` of a spare buffer were brought up to the latest version ahead
  // of the next.
  virtual void CaughtUp(size_t bytes) = 0;
  virtual void SendAck(const AckReport& ack) = 0;

  // In-place versions. Whether the frames of a version are held until it is
  // complete (ReplicaReceiver::Hold) so that it can go into the latest buffer
  // in one short write.
  virtual bool InPlaceCapable() { return false; }
  // Takes the latest buffer for that write: true only if every local reader
  // mapping it waits for a newer version (and yields it meanwhile).
  virtual bool BeginInPlace() { return false; }
  // The taken buffer now holds `version` (`bytes_copied` written): it stays
  // the latest, and its readers get it back.
  virtual void EndInPlace(uint64_t /*version*/, size_t /*bytes_copied*/, uint64_t /*now_ns*/) {}
};

// What AreaImport did, for dsmctl (added to, never reset).
struct ImportCounters {
  uint64_t versions_received = 0;
  uint64_t versions_received_in_place = 0;  // frames went straight to the published buffer
  uint64_t versions_received_forward = 0;   // of those: also into the next version's buffer
  // Held until complete, then written into the latest buffer while every
  // local reader of it waited (ImportHost::BeginInPlace).
  uint64_t versions_written_in_place = 0;
  uint64_t acks_out = 0;
  uint64_t resyncs = 0;  // replicas that made no progress and asked for the whole area anew
};

class AreaImport {
 public:
  // `buffer_count`: the replica's reader buffers. Aims at a spare at once.
  AreaImport(size_t area_bytes, uint32_t buffer_count, const SyncParams& params, ImportHost* host,
             ImportCounters* counters);

  // A DATA frame of this area (validated by wire::Decode, from the writer's
  // host, addressed here). Returns why it was not used (kNone: it was).
  wire::DropReason OnData(const wire::Frame& frame, uint64_t now_ns);
  // One turn: publishes a version that waits for a free buffer, aims the
  // next at one, asks for frames of a transfer that stopped coming. Returns
  // whether anything happened.
  bool Turn(uint64_t now_ns);

  // DATA claiming versions above this is refused: the writer's host
  // advertises its latest version (plus SyncParams::version_slack).
  void set_version_limit(uint64_t limit) { receiver_.set_version_limit(limit); }
  // The writer's host lists `latest` as the area's newest version (its
  // directory, heard at `now_ns`): Turn compares it with the replica's.
  void OnWriterLatest(uint64_t latest, uint64_t now_ns);
  uint64_t writer_latest() const { return writer_latest_; }

  // Where the end of each stage of a version is marked (nullptr: nowhere).
  void set_stage_marks(StageMarks* marks) { marks_ = marks; }

  const ReplicaReceiver& receiver() const { return receiver_; }
  const VersionPublisher& publisher() const { return publisher_; }
  // The buffer frames of the next version go to; -1: the staging copy.
  int target() const { return target_; }
  // Whether the replica published a version within SyncParams::spare_await_ns
  // and has no spare for the next one yet (local readers hold it): its next
  // turn should come soon, readers do not wake dsmd.
  bool AwaitsSpare(uint64_t now_ns) const {
    return target_ < 0 && !receiver_.holding() && !receiver_.assembling() && published_ns_ != 0 &&
           now_ns - published_ns_ < params_.spare_await_ns;
  }
  // When the last version was published (0: none yet).
  uint64_t published_ns() const { return published_ns_; }
  // Whether a timer of this replica may come due within about a
  // millisecond: a version it assembles may miss frames (asked for
  // SyncParams::nack_after_tail_ns after the last came), or a complete one
  // waits for local readers to free a buffer. Otherwise its timers are tens
  // of milliseconds away (re-ACKs, resyncs) and the frames that change that
  // wake dsmd: its loop may sleep longer.
  bool AwaitsPromptTimer() const { return receiver_.assembling() || receiver_.publish_pending(); }

 private:
  // Between versions: points the receiver at a spare buffer, or at the
  // staging copy when local readers pin every spare. `catch_up`: also bring
  // that buffer up to the latest version now (not when a frame of the next
  // version is already waiting).
  void Aim(bool catch_up);
  // At a version's first line: lets its frames also write the spare after
  // the target (ReplicaReceiver::SetForward), if local readers do not pin
  // it. The next version likely goes there, and then misses only the
  // version before this one rather than both.
  void AimForward();
  // Publishes the completed version (false: no buffer free yet).
  bool Publish(uint64_t now_ns);
  // The same for a version whose frames were held: in place into the latest
  // buffer if its readers all wait, else into a spare.
  bool PublishHeld(uint64_t now_ns);
  // A held version outgrows SyncParams::hold_max_bytes: its lines go to a
  // spare (or the staging copy) from now on.
  void Spill();
  // Tells the writer's host the complete version and what is missing of the
  // one assembled: `every_missing` (a NACK after the quiet), every range up to
  // SyncParams::nack_max_ranges in several ACK frames; else one frame's worth.
  void SendAck(uint64_t now_ns, bool every_missing);
  // No progress for SyncParams::resync_after_ns while the writer's host
  // lists another version: whether to start over from the whole area.
  bool Stuck(uint64_t now_ns) const;
  // Forgets what was assembled and the versions seen, and asks the writer's
  // host for the whole area (an ACK holding nothing).
  void Resync(uint64_t now_ns);

  SyncParams params_;
  ImportHost* host_;
  ImportCounters* counters_;
  StageMarks* marks_ = nullptr;
  uint64_t first_frame_marked_ = 0;  // the newest version whose first frame was marked
  uint16_t origin_host_ = 0;         // the frames' source, for the marks
  ReplicaReceiver receiver_;
  VersionPublisher publisher_;
  int target_ = -1;
  int forward_ = -1;  // the buffer frames also go to (AimForward); -1: none
  uint64_t published_ns_ = 0;  // when the last version was published (0: none yet)
  uint64_t last_ack_ns_ = 0;
  uint32_t idle_reacks_ = 0;  // ACKs repeated since the last completion
  // The pass of frames coming now (a transfer's, or the resends a NACK asked
  // for) and its last frame: once that came, what is missing was lost.
  uint32_t pass_transfer_ = 0;
  uint64_t pass_version_ = 0;
  uint32_t pass_last_seq_ = 0;
  bool pass_open_ = false;
  std::vector<wire::SeqRange> missing_;  // SendAck's scratch
  // Progress: the last accepted frame or completion (or the start, or the
  // last resync), and the writer's latest as its host last listed it.
  uint64_t progress_ns_ = 0;
  bool progress_started_ = false;
  uint64_t writer_latest_ = 0;
  uint64_t writer_latest_ns_ = 0;
  uint64_t heard_since_ns_ = 0;  // listings came without a long gap since
  bool writer_latest_known_ = false;
};

}  // namespace dsm

#endif  // DSM_COHERENCE_AREA_IMPORT_H_
