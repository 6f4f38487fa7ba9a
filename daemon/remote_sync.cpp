#include "daemon/remote_sync.h"

#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstring>

#include "daemon/tunables.h"
#include "libdsm/contract/clock.h"
#include "net/link_mesh_transport.h"

namespace dsm {

namespace {

// Random bits from the kernel; the clock and pid if it has none to give.
uint64_t RandomBits() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(v))) {
    v = (MonotonicNs() << 16) ^ static_cast<uint64_t>(getpid());
  }
  return v;
}

uint32_t DrawIncarnation() {
  uint32_t v;
  do {
    v = static_cast<uint32_t>(RandomBits() >> 17);
  } while (v == 0);
  return v;
}

}  // namespace

RemoteSync::RemoteSync(const DaemonConfig& config, const ClusterConfig& cluster,
                       ControlSegment* segment, AreaDirectory* directory, uint8_t* backing_base)
    : config_(config),
      cluster_(cluster),
      segment_(segment),
      directory_(directory),
      backing_(backing_base),
      stats_(segment->header.remote),
      // Differs at every start (but for a 1 in 2^32 chance), so peers tell
      // a restarted daemon's frames from its predecessor's.
      incarnation_(DrawIncarnation()),
      params_(config.sync),
      timeline_(&segment->timeline) {}

RemoteSync::~RemoteSync() = default;

bool RemoteSync::Start(std::string* error) {
  const ClusterHost* self = cluster_.Find(static_cast<uint16_t>(config_.host_id));
  if (!self) {
    *error = "host id " + std::to_string(config_.host_id) + " is not in the cluster file";
    return false;
  }
  net::PortConfig port = PortConfigFor(cluster_, *self);
  port.device = self->device;
  port.file_prefix = "dsmd-h" + std::to_string(config_.host_id) + "-" + std::to_string(getpid());
  port.pace_bits_per_sec = config_.pace_bits_per_sec;
  auto transport = self->links.empty() ? net::OpenDpdkTransport(port, error)
                                       : net::OpenLinkMeshTransport(port, self->links, error);
  if (!transport) return false;
  return Start(std::move(transport), error);
}

bool RemoteSync::Start(std::unique_ptr<net::Transport> transport, std::string* error) {
  const ClusterHost* self = cluster_.Find(static_cast<uint16_t>(config_.host_id));
  if (!self) {
    *error = "host id " + std::to_string(config_.host_id) + " is not in the cluster file";
    return false;
  }
  std::vector<uint16_t> peers;
  for (const ClusterHost& h : cluster_.hosts) {
    if (h.id != self->id) peers.push_back(h.id);
  }
  if (!cluster_.key_file.empty()) {
    if (!LoadKeys(error)) return false;
    key_file_watch_ = std::make_unique<FileChangeWatch>(cluster_.key_file);
  }
  transport_ = std::move(transport);
  if (config_.faults.drop > 0 || config_.faults.duplicate > 0 || config_.faults.reorder > 0 ||
      config_.faults.corrupt > 0) {
    spdlog::warn("fault injection on: drop {} duplicate {} reorder {} corrupt {} (seed {})",
                 config_.faults.drop, config_.faults.duplicate, config_.faults.reorder,
                 config_.faults.corrupt, config_.faults.seed);
    transport_ = net::WithFaults(std::move(transport_), config_.faults);
  }
  membership_ = std::make_unique<Membership>(peers, kHostDownAfterNs, kHelloRetryNs, RandomBits());
  segment_->header.cluster_hosts = static_cast<uint32_t>(cluster_.hosts.size());
  spdlog::info("remote sync on {} (mtu {}, {} peer(s), {}, {})",
               self->links.empty() ? self->device : std::to_string(self->links.size()) + " links",
               cluster_.mtu_bytes,
               peers.size(), cluster_.multicast ? "multicast fan-out" : "unicast",
               seal_.keyed() ? "frames authenticated" : "frames checksummed");
  return true;
}

bool RemoteSync::LoadKeys(std::string* error) {
  const auto keys = LoadKeyFile(cluster_.key_file, error);
  if (!keys) return false;
  if (!seal_.SetKeys(*keys)) {
    *error = "key file " + cluster_.key_file + ": cannot use these keys";
    return false;
  }
  stats_.signing_key_id = seal_.signing_key_id();
  stats_.keys_held = keys->size();
  std::string ids;
  for (const wire::FrameKey& k : *keys) ids += (ids.empty() ? "" : ", ") + std::to_string(k.id);
  spdlog::info("frame keys from {}: signing with key {}, accepting {}", cluster_.key_file,
               seal_.signing_key_id(), ids);
  return true;
}

void RemoteSync::PublishTransportCounters() {
  stats_.data_frames_out = export_counters_.data_frames_out;
  stats_.data_bytes_out = export_counters_.data_bytes_out;
  stats_.changed_bytes_out = export_counters_.changed_bytes_out;
  stats_.transfers_sent = export_counters_.transfers_sent;
  stats_.retransmitted_frames = export_counters_.retransmitted_frames;
  stats_.versions_collected = export_counters_.versions_collected;
  stats_.versions_shadowed = export_counters_.versions_shadowed;
  stats_.pins_yielded = export_counters_.pins_yielded;
  stats_.versions_from_stage = export_counters_.versions_from_stage;
  stats_.frames_from_stage = export_counters_.frames_from_stage;
  stats_.managed_lines_deferred = export_counters_.managed_lines_deferred;
  stats_.managed_due_lines = export_counters_.managed_due_lines;
  stats_.managed_over_budget_bytes = export_counters_.managed_over_budget_bytes;
  stats_.versions_received = import_counters_.versions_received;
  stats_.versions_received_in_place = import_counters_.versions_received_in_place;
  stats_.versions_received_forward = import_counters_.versions_received_forward;
  stats_.versions_written_in_place = import_counters_.versions_written_in_place;
  stats_.acks_out = import_counters_.acks_out;
  stats_.replica_resyncs = import_counters_.resyncs;
  const net::TransportStats t = transport_->stats();
  stats_.tx_frames = t.tx_frames;
  stats_.tx_bytes = t.tx_bytes;
  stats_.tx_dropped = t.tx_dropped;
  stats_.tx_tail_frames = t.tx_tail_frames;
  stats_.rx_frames = t.rx_frames;
  stats_.rx_bytes = t.rx_bytes;
  stats_.rx_dropped_malformed = t.rx_dropped_malformed;
  stats_.rx_dropped_not_for_us = t.rx_dropped_not_for_us;
  stats_.rx_dropped_unknown_source = t.rx_dropped_unknown_source;
  stats_.faults_injected =
      t.faults_dropped + t.faults_duplicated + t.faults_reordered + t.faults_corrupted;
}

void RemoteSync::PublishState() {
  ControlHeader& h = segment_->header;
  for (const ClusterHost& c : cluster_.hosts) {
    HostInfo& info = h.hosts[c.id];
    info.in_cluster = 1;
    if (c.id == config_.host_id) {
      info.up = 1;
      info.last_heard_ns = MonotonicNs();
      info.incarnation = incarnation_;
      info.region_used_bytes = h.backing_used_bytes.load();
      info.region_bytes = h.backing_bytes;
    } else {
      info.up = membership_->up(c.id);
      info.last_heard_ns = membership_->last_heard_ns(c.id);
      info.incarnation = membership_->incarnation(c.id);
    }
  }
}

wire::Header RemoteSync::MakeHeader(wire::FrameType type) const {
  wire::Header h{};
  h.magic = wire::kMagic;
  h.protocol_version = wire::kProtocolVersion;
  h.type = static_cast<uint8_t>(type);
  h.source_host = static_cast<uint16_t>(config_.host_id);
  h.dest_host = wire::kAllHosts;
  h.incarnation = incarnation_;
  return h;
}

void RemoteSync::SendSmall(net::Destination dest, wire::FrameType type, uint32_t area_index,
                           uint32_t area_generation, uint64_t version, uint64_t base,
                           uint16_t flags, uint32_t transfer_id, std::span<const uint8_t> body) {
  wire::Header h = MakeHeader(type);
  h.area_index = area_index;
  h.area_generation = area_generation;
  h.version = version;
  h.base_version = base;
  h.flags = flags;
  h.transfer_id = transfer_id;
  SendFrame(dest, h, body);
}

void RemoteSync::SendFrame(net::Destination dest, wire::Header h, std::span<const uint8_t> body) {
  if (seal_.header_bytes() + body.size() > transport_->max_payload_bytes()) return;
  uint8_t* buf = transport_->Reserve(dest);
  if (!buf) return;
  h.dest_host = dest.multicast ? wire::kAllHosts : dest.host;
  std::memcpy(buf, &h, sizeof(h));
  if (!body.empty()) std::memcpy(buf + seal_.header_bytes(), body.data(), body.size());
  seal_.Seal(buf, static_cast<uint32_t>(body.size()));
  transport_->Commit(seal_.header_bytes() + body.size());
  ++small_frames_out_;
}

bool RemoteSync::Poll(uint64_t now_ns) {
  bool worked = false;
  // First, before anything flushes: queued frames must not read a freed
  // area's memory, nor reach a slot reused since.
  DropTailsOfFreedExports();
  DropFreedReplicas();
  constexpr size_t kPollFrames = 64;
  replication_frames_in_ = false;
  const size_t got = transport_->Poll(kPollFrames, [&](std::span<const uint8_t> bytes, uint16_t source) {
    Receive(bytes, source, now_ns);
  });
  // Heartbeats and listings (tens a second) are handled as they come, but
  // do not keep the loop spinning: only replication traffic, or a full
  // burst (more waiting), is worth polling again at once.
  worked |= replication_frames_in_ || got == kPollFrames;
  // dsmd itself did not run for a while (descheduled, stopped): its peers'
  // frames may wait unread, so their silence says nothing yet.
  const bool stalled = now_ns - last_poll_ns_ > kHostDownAfterNs / 2;
  last_poll_ns_ = now_ns;

  ++stats_.loop_turns;
  if (key_file_watch_ && now_ns >= next_key_check_ns_) {
    next_key_check_ns_ = now_ns + kKeyFileCheckNs;
    if (key_file_watch_->Changed()) {
      std::string error;
      if (LoadKeys(&error)) {
        ++stats_.key_reloads;
      } else {
        spdlog::error("{}: keeping the keys in use", error);
      }
    }
  }
  const bool heartbeat_due = now_ns >= next_heartbeat_ns_;
  if (heartbeat_due) {
    SendHeartbeat(now_ns);
    next_heartbeat_ns_ = now_ns + kHeartbeatIntervalNs;
    expire_due_ = true;
    PublishState();
  }
  // Silence is judged with the receive queue drained, not after a stall: a
  // live host marked down would no longer hold back a writer's free.
  if (expire_due_ && got < kPollFrames && !stalled) {
    expire_due_ = false;
    const std::vector<uint16_t> down = membership_->Expire(now_ns);
    for (uint16_t host : down) OnHostDown(host);
    if (!down.empty()) PublishState();
  }
  const bool listing_changed = directory_->listing_changes() != listing_changes_sent_ &&
                               now_ns - last_directory_ns_ >= kDirectoryMinGapNs;
  // While no other host holds a replica of an area here, no staleness
  // needs the listing more often than a heartbeat: it goes with the
  // heartbeat, in the same wake (an idle 3-host memif cluster's daemons:
  // 1.65-8.3% of a core each with listings every 40 ms, 0.75-1.05% so).
  const bool export_live = AnyExportLive();
  const bool listing_due = export_live ? now_ns >= next_directory_ns_ : heartbeat_due;
  if (listing_due || listing_changed) {
    listing_changes_sent_ = directory_->listing_changes();
    SendDirectory(now_ns, /*lazy=*/!listing_changed && !export_live);
    last_directory_ns_ = now_ns;
    next_directory_ns_ = now_ns + kDirectoryIntervalNs;
  }
  for (auto& [index, e] : exports_) {
    if (ExportTurn(e, now_ns)) {
      worked = true;
      last_activity_ns_ = now_ns;
    }
  }
  for (auto& r : replicas_) {
    const uint64_t resyncs = import_counters_.resyncs;
    worked |= r->area->Turn(now_ns);
    if (import_counters_.resyncs != resyncs) {
      spdlog::warn("replica '{}' of host {} made no progress while its writer's host listed version "
                   "{}: asking for the whole area anew",
                   r->name, r->origin_host, r->area->writer_latest());
    }
  }
  // Frames beyond this turn's own small ones: DATA queued earlier going out.
  worked |= transport_->Flush() > small_frames_out_;
  small_frames_out_ = 0;
  if (timeline_.transmit_pending() && transport_->tx_backlog() == 0) timeline_.DeviceDrained();
  // Every turn (a copy of a few counters), so dsmctl's frame and byte counts
  // agree with the daemon's own at any moment.
  PublishTransportCounters();
  return worked;
}

void RemoteSync::Drop(wire::DropReason r) {
  static_assert(static_cast<size_t>(wire::DropReason::kCount) <= kDropReasonSlots);
  const uint64_t n = ++stats_.dropped[static_cast<size_t>(r)];
  if ((n & (n - 1)) == 0) {  // 1st, 2nd, 4th, 8th...: visible without flooding the log
    spdlog::debug("dropped a frame: {} ({} so far)", wire::DropReasonName(r), n);
  }
}

void RemoteSync::Receive(std::span<const uint8_t> bytes, uint16_t source_host, uint64_t now_ns) {
  ++stats_.frames_in;
  wire::Frame f;
  const wire::DropReason r = wire::Decode(bytes, seal_, &f);
  if (r != wire::DropReason::kNone) {
    Drop(r);
    return;
  }
  // The transport knows the sender by its address; the header must agree.
  if (f.header.source_host != source_host || !membership_->known(source_host)) {
    Drop(wire::DropReason::kUnknownHost);
    return;
  }
  if (f.header.dest_host != wire::kAllHosts && f.header.dest_host != config_.host_id) {
    Drop(wire::DropReason::kUnknownHost);
    return;
  }
  // Hellos are how incarnations get confirmed, so they need none.
  const auto type = static_cast<wire::FrameType>(f.header.type);
  if (type == wire::FrameType::kHello) return OnHello(f, source_host);
  if (type == wire::FrameType::kHelloReply) return OnHelloReply(f, source_host, now_ns);
  if (!Admit(f, source_host, now_ns)) return;
  switch (type) {
    case wire::FrameType::kHeartbeat:
      OnHeartbeat(f, source_host);
      break;
    case wire::FrameType::kDirectory:
      OnDirectory(f, source_host, now_ns);
      break;
    case wire::FrameType::kSubscribe:
      OnSubscribe(f, source_host, now_ns);
      break;
    case wire::FrameType::kAck:
      last_activity_ns_ = now_ns;
      replication_frames_in_ = true;
      OnAck(f, source_host, now_ns);
      break;
    case wire::FrameType::kData:
      last_activity_ns_ = now_ns;
      replication_frames_in_ = true;
      OnData(f, source_host, now_ns);
      break;
    case wire::FrameType::kHello:
    case wire::FrameType::kHelloReply:
      break;
  }
}

}  // namespace dsm
