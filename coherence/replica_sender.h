// The sending side of one area toward the hosts that replicate it: which lines
// each host still lacks, and which transfer to send to whom. Pure logic: the
// caller (AreaExport) collects versions, frames and transmits them.
//
// One transfer in flight per host: a host gets the next one when it acknowledged
// the last or the retransmission timeout passed. A slow host therefore receives
// fewer, larger versions (the union of changes since its acknowledged version)
// and never holds back the writer or the other hosts.
#ifndef DSM_COHERENCE_REPLICA_SENDER_H_
#define DSM_COHERENCE_REPLICA_SENDER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "coherence/line_set.h"

namespace dsm {

struct Transfer {
  std::vector<uint16_t> hosts;  // receivers in the same state, sent one copy
  uint64_t version = 0;         // the shadow's version
  uint64_t base = 0;            // lines changed since this version (ignored if full)
  bool full = false;            // the whole area
  uint32_t transfer_id = 0;
  // Shared with the sender: when every host of the transfer lacks exactly the
  // lines of the collected version, this is the sender's set of them.
  std::shared_ptr<const LineSet> lines;
};

class ReplicaSender {
 public:
  // `shared_transfers`: one transfer may serve several hosts (the network
  // delivers one copy to all of them, multicast); false: one host per transfer.
  explicit ReplicaSender(size_t area_bytes, bool shared_transfers = true);

  // A host's measured timeout never exceeds this (heartbeats judge hosts
  // that stop answering altogether).
  static constexpr uint64_t kMaxRtoNs = 1'000'000'000;
  // Each transfer that timed out with nothing heard from its host doubles
  // that host's timeout, as TCP backs off, at most this many times (and to
  // kMaxRtoNs): a host gone silent is not sent the growing union every
  // timeout until membership marks it down, and one that merely lost a
  // transfer or two is not left waiting long.
  static constexpr uint32_t kMaxBackoffs = 4;

  // `host` replicates the area from now on and holds nothing usable: it gets
  // the whole area first.
  void Subscribe(uint16_t host);
  void Unsubscribe(uint16_t host);
  bool subscribed(uint16_t host) const { return hosts_.count(host) != 0; }
  size_t subscribers() const { return hosts_.size(); }
  // Membership says `host` is down (silent) or up again. A down host stays
  // subscribed but gets no transfers, and neither holds the shadow nor
  // counts in MinAcked; back up, it is due at once, from its last ack.
  void SetHostUp(uint16_t host, bool up);
  // Subscribed hosts that are up: someone to ship to.
  size_t reachable() const;
  bool up(uint16_t host) const;

  // The shadow now holds `version`; `changed` are the lines that differ from
  // the previously collected version.
  void Collected(uint64_t version, const LineSet& changed);
  // The same, taking `changed` as it is (one of NewSet's, filled by the caller).
  void Collected(uint64_t version, std::shared_ptr<LineSet> changed);
  // An empty set from the pool the transfers' sets come from.
  std::shared_ptr<LineSet> NewSet() { return FreeSet(); }
  uint64_t version() const { return version_; }

  // `host` reports its last complete version; `now_ns` (0: unknown) times
  // the acknowledgement of a transfer sent once, for the host's timeout.
  void OnAck(uint16_t host, uint64_t complete_version, uint64_t now_ns = 0);
  // `host` reports it holds no version at all (it is still assembling its first
  // transfer, or it lost its copy): this is not an ack of any version.
  void OnAckNothing(uint16_t host);

  // `host` misses frames of transfer `transfer_id`, which can no longer be
  // resent (the sender gave its version's buffer back to the writer). If that
  // is the transfer it awaits, it is due at once rather than at the timeout:
  // its next transfer brings those lines again, at the newest version.
  void OnLostTransfer(uint16_t host, uint32_t transfer_id);

  // Frames `host` reported missing of transfer `transfer_id` were resent at
  // `now_ns`. If that is the transfer it awaits, its timeout starts again: a
  // host that keeps asking is making progress, and a new transfer (which it
  // would have to assemble from its first frame) would undo that progress.
  void OnResent(uint16_t host, uint32_t transfer_id, uint64_t now_ns);

  // The next transfer due at `now_ns`, if any. Every due host that holds a
  // version shares one delta from the oldest base among them; due hosts with
  // nothing share one full transfer. A host's transfer is due again (as the
  // newer union) after `rto_ns`, or after what its acknowledgements took
  // lately if that is longer: smoothed time plus four deviations, as TCP
  // does (RFC 6298), at most kMaxRtoNs, doubled per timeout since the host
  // was last heard from (kMaxBackoffs). A host that is slow for a while is
  // then not sent unions it would receive only after what is already on
  // its way (which the other hosts drop as stale, multicast).
  bool NextTransfer(uint64_t now_ns, uint64_t rto_ns, Transfer* out);
  // Whether `t` carries exactly the lines changed in the collected version
  // (one version behind for all its hosts, as usual when they keep up).
  bool CarriesCollectedChanges(const Transfer& t) const {
    return t.lines != nullptr && t.lines == collected_ && t.version == version_;
  }
  // Whether NextTransfer would return a transfer at `now_ns`.
  bool AnyDue(uint64_t now_ns, uint64_t rto_ns) const;
  // The transfer was handed to the transport.
  void Sent(const Transfer& t, uint64_t now_ns);

  // Whether some host that is up has a transfer out for less than `rto_ns` (not the
  // host's own timeout: a slow host holds the others back no longer than
  // that): its missing frames may still be asked for, so the shadow should
  // not move yet.
  bool AwaitingAcks(uint64_t now_ns, uint64_t rto_ns) const;
  uint64_t acked(uint16_t host) const;
  // Whether `transfer_id` is the transfer `host` is being sent (not
  // acknowledged yet): reports of missing frames of any other are stale.
  bool InFlight(uint16_t host, uint32_t transfer_id) const;
  // The newest version every subscribed host that is up is known to hold (0
  // if one holds none yet; UINT64_MAX with none): what a writer freeing the
  // area waits for, so its last versions are not lost to the other hosts.
  uint64_t MinAcked() const;

 private:
  // A host's lines: its own set, or exactly one collected version's changes,
  // shared with every other host one version behind (no copy per host).
  struct HostLines {
    explicit HostLines(size_t area_bytes) : own(area_bytes) {}
    LineSet own;
    std::shared_ptr<const LineSet> shared;  // set: the lines are *shared; `own` is empty
    bool Empty() const { return shared ? shared->Empty() : own.Empty(); }
    void Clear() {
      own.Clear();
      shared.reset();
    }
    void Add(const LineSet& lines) {
      if (shared) own.Merge(*shared);
      shared.reset();
      own.Merge(lines);
    }
    void AddTo(LineSet* out) const { out->Merge(shared ? *shared : own); }
  };
  struct HostState {
    explicit HostState(size_t area_bytes) : unacked(area_bytes), inflight(area_bytes) {}
    bool up = true;         // membership has not marked it down
    bool has_base = false;  // `acked` is a version it really holds
    uint64_t acked = 0;
    HostLines unacked;       // changed since `acked`, not yet sent
    HostLines inflight;      // sent in the transfer awaiting acknowledgement
    bool in_flight = false;  // a transfer awaits acknowledgement
    uint64_t inflight_version = 0;
    uint64_t sent_ns = 0;
    uint32_t transfer_id = 0;
    bool resent = false;  // the transfer out replaced one still out: its ack is ambiguous
    uint32_t backoffs = 0;  // transfers timed out since the host was last heard from
    bool rtt_known = false;
    uint64_t srtt_ns = 0;    // smoothed time from a transfer's last frame to its ack
    uint64_t rttvar_ns = 0;  // and its mean deviation
  };
  bool Due(const HostState& h, uint64_t now_ns, uint64_t rto_ns) const;
  // `rto_ns`, or the host's measured timeout if longer.
  static uint64_t HostRto(const HostState& h, uint64_t rto_ns);

  size_t area_bytes_;
  bool shared_transfers_;
  uint64_t version_ = 0;
  bool have_version_ = false;
  uint32_t next_transfer_id_ = 1;
  std::map<uint16_t, std::unique_ptr<HostState>> hosts_;
  // An empty set from the pool (one nobody else holds), else a new one: a
  // set covers the whole area, and allocating and zeroing one per version
  // or transfer shows.
  std::shared_ptr<LineSet> FreeSet();
  static constexpr size_t kMaxPooledSets = 8;
  std::vector<std::shared_ptr<LineSet>> pool_;
  std::shared_ptr<const LineSet> collected_;  // lines changed in the collected version
};

}  // namespace dsm

#endif  // DSM_COHERENCE_REPLICA_SENDER_H_
