#include "daemon/daemon.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>

#include "daemon/tunables.h"
#include "libdsm/contract/clock.h"
#include "libdsm/contract/control_protocol.h"
#include "libdsm/contract/region_limits.h"
#include "libdsm/contract/socket_io.h"

namespace dsm {

namespace {

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void FillReply(Reply* r, const DirectoryResult& res, uint32_t client_id) {
  std::memset(r, 0, sizeof(*r));
  r->magic = kProtocolMagic;
  r->type = NoticeType::kReply;
  r->status = res.status;
  r->client_id = client_id;
  r->area_index = res.area_index;
  r->area_generation = res.area_generation;
  r->reader_slot = res.reader_slot;
  std::snprintf(r->message, sizeof(r->message), "%s", res.message.c_str());
}

}  // namespace

Daemon::Daemon(const DaemonConfig& config) : config_(config) {}

Daemon::~Daemon() {
  for (auto& [fd, conn] : connections_) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(config_.socket_path.c_str());
  }
  if (rx_wake_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, rx_wake_fd_, nullptr);
  remote_.reset();
  if (backing_base_) munmap(backing_base_, backing_.bytes);
  for (int fd : {epoll_fd_, signal_fd_, doorbell_fd_, control_fd_, backing_.fd}) {
    if (fd >= 0) close(fd);
  }
  if (segment_) munmap(segment_, sizeof(ControlSegment));
}

bool Daemon::Start(std::string* error) {
  // Block the signals we read from a signalfd before any thread exists (DPDK's
  // EAL starts some): threads inherit the mask, so none of them can take a
  // SIGTERM and die of it instead of letting us shut down cleanly.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  if (config_.host_id >= kMaxHosts) {
    *error = "--host-id must be below " + std::to_string(kMaxHosts);
    return false;
  }
  backing_ = CreateBacking(config_.backing, config_.region_bytes, config_.hugetlbfs_dir, error);
  if (backing_.fd < 0) return false;
  spdlog::info("backing: {} bytes of {}", backing_.bytes, backing_.description);
  if (!CreateControlSegment(error)) return false;
  directory_ = std::make_unique<AreaDirectory>(segment_, backing_);
  // NORESERVE: hugetlbfs would otherwise reserve pages for the whole range now.
  void* base = mmap(nullptr, backing_.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                    backing_.fd, 0);
  if (base == MAP_FAILED) {
    *error = Errno("cannot map the backing");
    return false;
  }
  backing_base_ = static_cast<uint8_t*>(base);
  // Writers hand their versions to us only if they can wake us.
  stages_ = std::make_unique<StageAppliers>(segment_, backing_base_);
  directory_->set_stages(config_.stages && !config_.no_doorbell);
  if (!config_.cluster_file.empty()) {
    const auto cluster = LoadClusterConfig(config_.cluster_file, error);
    if (!cluster) return false;
    remote_ = std::make_unique<RemoteSync>(config_, *cluster, segment_, directory_.get(), backing_base_);
    remote_->set_stages(stages_.get());
    if (!remote_->Start(error)) return false;
  }

  signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  doorbell_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (signal_fd_ < 0 || epoll_fd_ < 0 || doorbell_fd_ < 0) {
    *error = Errno("cannot create event descriptors");
    return false;
  }
  if (!Listen(error)) return false;
  for (int fd : {listen_fd_, signal_fd_, doorbell_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  // Frames wake us where the transport can say they came (af_packet's
  // socket, a memif mesh's doorbell).
  if (remote_ && remote_->rx_wake_fd() >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = remote_->rx_wake_fd();
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, ev.data.fd, &ev) == 0) rx_wake_fd_ = ev.data.fd;
  }
  return true;
}

bool Daemon::CreateControlSegment(std::string* error) {
  control_fd_ = memfd_create("dsmd-control", MFD_CLOEXEC);
  if (control_fd_ < 0 || ftruncate(control_fd_, sizeof(ControlSegment)) != 0) {
    *error = Errno("cannot create the control segment");
    return false;
  }
  void* p = mmap(nullptr, sizeof(ControlSegment), PROT_READ | PROT_WRITE, MAP_SHARED, control_fd_, 0);
  if (p == MAP_FAILED) {
    *error = Errno("cannot map the control segment");
    return false;
  }
  // The memfd is zero-filled, which is every area's kFree state; construct in place.
  segment_ = new (p) ControlSegment;
  InitControlHeader(segment_, config_, backing_);
  return true;
}

void InitControlHeader(ControlSegment* segment, const DaemonConfig& config, const Backing& backing) {
  ControlHeader& h = segment->header;
  h.magic = kControlMagic;
  h.layout_version = kLayoutVersion;
  h.host_id = config.host_id;
  h.region_base = kRegionBase;
  h.region_bytes = kRegionBytes;
  h.slice_base = kRegionBase + uint64_t{config.host_id} * kHostSliceBytes;
  h.slice_bytes = kHostSliceBytes;
  h.backing_bytes = backing.bytes;
  h.backing_page_bytes = backing.page_bytes;
  h.backing_kind = backing.kind;
  h.daemon_pid = getpid();
  h.default_sync_interval_ns = uint64_t{config.sync_interval_us} * 1000;
  h.default_staleness_bound_ns = uint64_t{config.staleness_bound_ms} * 1000000;
  h.daemon_alive.store(1);
}

bool Daemon::Listen(std::string* error) {
  const std::filesystem::path path(config_.socket_path);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (config_.socket_path.size() >= sizeof(addr.sun_path)) {
    *error = "socket path too long (max " + std::to_string(sizeof(addr.sun_path) - 1) + "): " +
             config_.socket_path;
    return false;
  }
  std::memcpy(addr.sun_path, config_.socket_path.c_str(), config_.socket_path.size());
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  // The instance lock is held, so a socket file here is a dead daemon's leftover.
  unlink(config_.socket_path.c_str());
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    *error = Errno(("cannot listen on " + config_.socket_path).c_str());
    return false;
  }
  chmod(config_.socket_path.c_str(), 0666);
  return true;
}

int Daemon::Run() {
  spdlog::info("dsmd host {} serving {} (pid {})", config_.host_id, config_.socket_path, getpid());
  epoll_event events[64];
  for (;;) {
    // Other hosts first: a staged version is framed for them straight from
    // the stage (AreaExport::CollectStaged) before it is written here.
    const bool shipped = remote_ && remote_->Poll(MonotonicNs());
    bool worked = stages_->Turn(MonotonicNs(), {.shipping = shipped, .may_wait_for_pin = true});
    // Catch-ups once frames for other hosts are out: off their path.
    if (!shipped) stages_->CatchUps();
    worked |= shipped;
    const int64_t sleep_ns = ArmDoorbell(IdleSleepNs(worked));
    // Busy: clients and signals are looked at every kBusyEpollGapNs, not
    // every turn (8-11 turns a version; the daemons' CPU per round fell
    // about 8% at memif R=3, docs/measurements.md).
    const uint64_t now_ns = MonotonicNs();
    if (sleep_ns == 0 && now_ns - last_epoll_ns_ < kBusyEpollGapNs) continue;
    last_epoll_ns_ = now_ns;
    timespec ts{sleep_ns / 1000000000, sleep_ns % 1000000000};
    const int n = epoll_pwait2(epoll_fd_, events, 64, sleep_ns < 0 ? nullptr : &ts, nullptr);
    if (sleep_ns != 0) segment_->header.doorbell_armed.store(0, std::memory_order_relaxed);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      spdlog::error("epoll_wait: {}", std::strerror(errno));
      Shutdown();
      return 1;
    }
    // Woken by a client after a sleep: frames that came meanwhile (a listing
    // that gives a name to a new area) are taken in before it is answered.
    if (n > 0 && sleep_ns != 0 && remote_) remote_->Poll(MonotonicNs());
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == signal_fd_) {
        signalfd_siginfo si{};
        (void)!read(signal_fd_, &si, sizeof(si));
        spdlog::info("signal {} received: shutting down", si.ssi_signo);
        Shutdown();
        return 0;
      }
      if (fd == rx_wake_fd_) continue;  // polled above
      if (fd == doorbell_fd_) {
        uint64_t rings;
        (void)!read(doorbell_fd_, &rings, sizeof(rings));  // the next turn collects
      } else if (fd == listen_fd_) {
        Accept();
      } else if (auto it = connections_.find(fd); it != connections_.end()) {
        if (events[i].events & EPOLLIN) {
          HandleRequest(it->second);
        } else {
          Disconnect(fd);
        }
        // A free (or a sealed area's name taken, or a client gone) may have
        // returned memory that queued frames still read from.
        if (remote_) remote_->DropTailsOfFreedExports();
      }
    }
  }
}

int64_t Daemon::IdleSleepNs(bool worked) {
  // Readers that free a buffer a staged version waits for do not wake us.
  if (stages_->AnyBlocked()) return worked ? 0 : static_cast<int64_t>(kStageBlockedPollNs);
  if (remote_ && (worked || config_.busy_poll)) {
    idle_turns_ = 0;
    return 0;
  }
  // A writer's next version is due about now: looking for it at every turn,
  // unarmed, spares the writer a ring (PostForecast).
  const uint64_t now = MonotonicNs();
  const int64_t post_poll = stages_->PostPollSleepNs(now);
  if (post_poll == 0) return 0;
  // One host: nothing else to poll, sleep until a client speaks.
  if (!remote_) return post_poll;
  // Spin a little while frames may still be coming, then back off to sleeping so
  // an idle daemon leaves the cores to the training and the kernel's network work.
  ++idle_turns_;
  const bool woken_by_frames = rx_wake_fd_ >= 0;
  if (idle_turns_ < (woken_by_frames ? kSpinTurnsWithRxWake : kSpinTurnsBeforeSleep)) return 0;
  const uint64_t cap = remote_->RecentlyActive(now) ? kActiveSleepMaxNs
                       : remote_->LongIdle(now)     ? kDeepIdleSleepMaxNs
                                                    : kIdleSleepMaxNs;
  uint64_t sleep_ns;
  if (woken_by_frames) {
    // Frames that come wake us: sleep until then, or until timers are due
    // (soon only while a replica may miss frames or waits for a buffer).
    sleep_ns = remote_->ReplicaAwaitsPromptTimer() ? std::max(cap, kActiveSleepMaxWithRxWakeNs)
                                                   : kQuietSleepMaxWithRxWakeNs;
    // Long idle: until its own next heartbeat or listing is due.
    if (remote_->LongIdle(now) && !remote_->ReplicaAwaitsPromptTimer()) {
      const uint64_t due = remote_->NextAnnouncementNs();
      sleep_ns = std::clamp<uint64_t>(due > now ? due - now : 0, kQuietSleepMaxWithRxWakeNs,
                                      kLongIdleSleepMaxWithRxWakeNs);
    }
  } else {
    const uint32_t doublings =
        std::min<uint32_t>((idle_turns_ - kSpinTurnsBeforeSleep) / kIdleTurnsPerDoubling, 8);
    sleep_ns = std::min<uint64_t>(kIdleSleepMinNs << doublings, cap);
  }
  // Readers that leave a replica's spare do not wake us.
  if (const uint64_t spare = remote_->SpareAwaitSleepNs(now); spare != 0) {
    sleep_ns = std::min(sleep_ns, spare);
  }
  if (post_poll > 0) sleep_ns = std::min(sleep_ns, static_cast<uint64_t>(post_poll));
  return static_cast<int64_t>(sleep_ns);
}

int64_t Daemon::ArmDoorbell(int64_t sleep_ns) {
  if (sleep_ns == 0 || config_.no_doorbell) return sleep_ns;
  // seq_cst store, then a seq_cst look at each stage and each exported
  // area's `latest`: a writer that posted or published before the arm is
  // seen here; one after it sees the arm and rings (RingDoorbell).
  segment_->header.doorbell_armed.store(1);
  if (!stages_->AnyDue() && !(remote_ && remote_->ExportDue(MonotonicNs()))) return sleep_ns;
  segment_->header.doorbell_armed.store(0, std::memory_order_relaxed);
  return 0;
}

void Daemon::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    ucred cred{};
    socklen_t len = sizeof(cred);
    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
    Connection conn{{next_client_id_++, cred.pid}, fd};
    if (next_client_id_ == 0) next_client_id_ = 1;  // 0 marks a free reader slot
    connections_[fd] = conn;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    spdlog::debug("client {} connected (pid {})", conn.client.id, conn.client.pid);
  }
}

void Daemon::HandleRequest(Connection& conn) {
  Request req{};
  int no_fds[1];
  const long n = RecvMessage(conn.fd, &req, sizeof(req), std::span<int>(no_fds, 0), 0);
  if (n == 0 || n == -ECONNRESET) {
    Disconnect(conn.fd);
    return;
  }
  DirectoryResult res;
  if (n != static_cast<long>(sizeof(req)) || req.magic != kProtocolMagic) {
    res.status = DSM_ERR_PROTOCOL;
    res.message = "malformed request";
  } else if (req.protocol_version != kProtocolVersion) {
    res.status = DSM_ERR_PROTOCOL;
    res.message = "client speaks protocol " + std::to_string(req.protocol_version) +
                  ", dsmd speaks " + std::to_string(kProtocolVersion) + ": rebuild one of them";
  } else {
    req.name[kMaxNameBytes - 1] = '\0';
    switch (req.type) {
      case RequestType::kHello: {
        Reply reply;
        FillReply(&reply, res, conn.client.id);
        const int fds[3] = {control_fd_, backing_.fd, doorbell_fd_};
        SendMessage(conn.fd, &reply, sizeof(reply), fds);
        return;
      }
      case RequestType::kAlloc:
        res = directory_->Alloc(conn.client, req, MonotonicNs());
        if (res.status == 0) stages_->Added(res.area_index);
        if (res.status == 0) spdlog::info("client {} allocated '{}' ({} bytes)", conn.client.id, req.name, req.size);
        break;
      case RequestType::kAttach:
        res = directory_->Attach(conn.client, req);
        if (res.status == DSM_ERR_NOT_FOUND && remote_) {
          int status = DSM_ERR_NOT_FOUND;
          const std::string fetching = remote_->RequestReplica(req.name, MonotonicNs(), &status);
          if (!fetching.empty()) res.message = fetching;
          res.status = status;
        }
        break;
      case RequestType::kFree:
        stages_->Turn(MonotonicNs());  // the last version posted, before its memory goes
        res = directory_->Free(conn.client, req);
        break;
      default:
        res.status = DSM_ERR_PROTOCOL;
        res.message = "unknown request type";
    }
  }
  Reply reply;
  FillReply(&reply, res, conn.client.id);
  SendMessage(conn.fd, &reply, sizeof(reply));
}

void Daemon::Disconnect(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  spdlog::debug("client {} (pid {}) left", it->second.client.id, it->second.client.pid);
  stages_->Turn(MonotonicNs());  // what a writer gone posted last, before its copy goes
  directory_->ClientGone(it->second.client);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  connections_.erase(it);
}

void Daemon::Shutdown() {
  stages_->Turn(MonotonicNs());  // what writers posted last becomes readable
  if (remote_) remote_->ReleasePins();
  segment_->header.daemon_alive.store(0);
  Reply notice{};
  notice.magic = kProtocolMagic;
  notice.type = NoticeType::kShutdown;
  notice.status = DSM_ERR_DAEMON_GONE;
  std::snprintf(notice.message, sizeof(notice.message), "dsmd host %u is shutting down",
                config_.host_id);
  for (auto& [fd, conn] : connections_) SendMessage(fd, &notice, sizeof(notice));
  spdlog::info("told {} client(s); removing {}", connections_.size(), config_.socket_path);
}

}  // namespace dsm
