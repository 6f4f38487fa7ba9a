#include "libdsm/session.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "coherence/staleness.h"
#include "libdsm/contract/clock.h"
#include "libdsm/contract/publish_protocol.h"
#include "libdsm/errors.h"
#include "libdsm/log_cache.h"
#include "libdsm/quiescence_gate.h"

namespace dsm {

namespace {

// How long a quiescent point waits for the process's other online threads.
constexpr uint64_t kDefaultQuiesceTimeoutUs = 5000;
// Attach polls the directory at this period while the name is unknown.
constexpr uint32_t kAttachPollMs = 2;
// How long dsm_free of an area other hosts replicate waits for them to
// acknowledge its last version ($DSM_FREE_DRAIN_MS).
constexpr uint64_t kDefaultFreeDrainMs = 2000;

uint64_t EnvU64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace

int ClientSession::Open(const dsm_init_opts* opts, std::unique_ptr<ClientSession>* out) {
  std::unique_ptr<ClientSession> s(new ClientSession());
  std::string path = DSM_DEFAULT_SOCKET;
  if (opts && opts->socket_path) {
    path = opts->socket_path;
  } else if (const char* env = std::getenv("DSM_SOCKET"); env && *env) {
    path = env;
  }
  const int timeout_ms = opts && opts->connect_timeout_ms ? static_cast<int>(opts->connect_timeout_ms) : 2000;
  s->quiesce_timeout_ns_ = EnvU64("DSM_QUIESCE_TIMEOUT_US", kDefaultQuiesceTimeoutUs) * 1000;
  s->free_drain_ns_ = EnvU64("DSM_FREE_DRAIN_MS", kDefaultFreeDrainMs) * 1000000;
  if (int rc = s->control_.Connect(path, timeout_ms); rc != DSM_OK) return rc;
  // While every thread sleeps (dsm_wait_version), dsmd may write a replica's
  // next version into the buffer this process maps.
  QuiescenceGate::Instance().SetIdleHooks(&ReaderArea::YieldReplicas, &ReaderArea::ReclaimReplicas);

  Request req{};
  req.type = RequestType::kHello;
  Reply reply{};
  int fds[3] = {-1, -1, -1};  // control segment, region backing, doorbell
  if (int rc = s->control_.Call(req, &reply, fds); rc != DSM_OK) return rc;
  if (fds[0] < 0 || fds[1] < 0) {
    for (int fd : fds) if (fd >= 0) close(fd);
    return Fail(DSM_ERR_PROTOCOL, "dsmd at {} did not pass its shared memory", path);
  }
  s->control_.set_doorbell(fds[2]);
  s->client_id_ = reply.client_id;
  s->region_fd_ = fds[1];
  void* seg = mmap(nullptr, sizeof(ControlSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  close(fds[0]);
  if (seg == MAP_FAILED) return Fail(DSM_ERR_SYSTEM, "cannot map the control segment: {}", strerror(errno));
  s->segment_ = static_cast<ControlSegment*>(seg);
  const ControlHeader& h = s->segment_->header;
  if (h.magic != kControlMagic || h.layout_version != kLayoutVersion) {
    return Fail(DSM_ERR_PROTOCOL, "dsmd at {} uses shared layout {} but this libdsm uses {}: "
                "rebuild one of them", path, h.layout_version, kLayoutVersion);
  }
  // The whole region, PROT_NONE: areas are later mapped over parts of it.
  void* want = reinterpret_cast<void*>(h.region_base);
  void* got = mmap(want, h.region_bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got != want) {
    if (got != MAP_FAILED) munmap(got, h.region_bytes);
    return Fail(DSM_ERR_ADDRESS, "the shared region [{:#x}, {:#x}) is already used in this "
                "process ({}); libdsm needs it free. Call dsm_init() early, before other "
                "large mappings", h.region_base, h.region_base + h.region_bytes,
                got == MAP_FAILED ? strerror(errno) : "the kernel placed it elsewhere");
  }
  s->region_reserved_ = true;
  *out = std::move(s);
  return DSM_OK;
}

ClientSession::~ClientSession() {
  {
    std::lock_guard lock(mu_);
    areas_.clear();
  }
  ForgetAllLogCaches();
  if (region_reserved_) munmap(reinterpret_cast<void*>(segment_->header.region_base), segment_->header.region_bytes);
  if (segment_) munmap(segment_, sizeof(ControlSegment));
  if (region_fd_ >= 0) close(region_fd_);
}

ClientSession::Area* ClientSession::FindLocked(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = areas_.upper_bound(addr);
  if (it == areas_.begin()) return nullptr;
  --it;
  Area& a = it->second;
  return addr - it->first < a.control()->size ? &a : nullptr;
}

void ClientSession::UnmapRange(uintptr_t addr, uint64_t bytes) {
  mmap(reinterpret_cast<void*>(addr), bytes, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

int ClientSession::Alloc(const char* name, size_t size, const dsm_alloc_opts* opts,
                         const dsm_managed_opts* managed, void** out) {
  if (!name || !out) return Fail(DSM_ERR_INVALID, "dsm_alloc: name and out must not be NULL");
  if (managed && managed->budget_bytes_per_s == 0) {
    return Fail(DSM_ERR_INVALID,
                "dsm_alloc_managed('{}'): budget_bytes_per_s is 0; give the "
                "bytes per second other hosts may be sent, or use dsm_alloc",
                name);
  }
  if (managed && !IsManagedElement(managed->element)) {
    return Fail(DSM_ERR_INVALID, "dsm_alloc_managed('{}'): element {} is not a dsm_element ({})",
                name, managed->element, kManagedElementsHelp);
  }
  if (size == 0) return Fail(DSM_ERR_INVALID, "dsm_alloc('{}'): size is 0", name);
  if (size > segment_->header.slice_bytes) {
    return Fail(DSM_ERR_NO_SPACE, "dsm_alloc('{}'): {} bytes is more than a host's whole "
                "address slice ({} bytes)", name, size, segment_->header.slice_bytes);
  }
  if (std::strlen(name) >= kMaxNameBytes) {
    return Fail(DSM_ERR_INVALID, "dsm_alloc: name '{}' is longer than {} bytes", name, kMaxNameBytes - 1);
  }
  const uint32_t tracking = opts ? opts->tracking : uint32_t{DSM_TRACK_LOG};
  uint32_t page_tracker = opts ? opts->page_tracker : uint32_t{DSM_PAGE_TRACKER_AUTO};
  if (page_tracker == 0) page_tracker = DSM_PAGE_TRACKER_AUTO;  // 0, the default, is AUTO
  if (tracking > DSM_TRACK_LOG_AND_PAGES) {
    return Fail(DSM_ERR_INVALID, "dsm_alloc('{}'): tracking {} is not a dsm_tracking value "
                "(DSM_TRACK_LOG, DSM_TRACK_PAGES, DSM_TRACK_LOG_AND_PAGES)", name, tracking);
  }
  if (page_tracker > DSM_PAGE_TRACKER_AUTO) {
    return Fail(DSM_ERR_INVALID, "dsm_alloc('{}'): page_tracker {} is not a dsm_page_tracker "
                "value (DSM_PAGE_TRACKER_AUTO, _UFFD, _MPROTECT, or 0 for AUTO)", name,
                page_tracker);
  }
  Request req{};
  req.type = RequestType::kAlloc;
  std::strncpy(req.name, name, kMaxNameBytes - 1);
  req.size = size;
  req.tracking = tracking;
  if (opts) {
    req.sync_interval_us = opts->sync_interval_us;
    req.staleness_bound_ms = opts->staleness_bound_ms;
    req.reader_buffers = opts->reader_buffers;
  }
  if (managed) {
    req.managed_budget_bytes_per_s = managed->budget_bytes_per_s;
    req.managed_max_line_age = managed->max_line_age;
    req.managed_element = managed->element != 0 ? managed->element : uint32_t{DSM_ELEMENT_FLOAT32};
  }
  Reply reply{};
  if (int rc = control_.Call(req, &reply); rc != DSM_OK) return rc;
  AreaControl* control = &segment_->areas[reply.area_index];
  DaemonLink link;
  link.ring_doorbell = [this] { control_.RingDoorbell(segment_->header.doorbell_armed); };
  link.daemon_alive = [this] {
    return segment_->header.daemon_alive.load() != 0 && !control_.PeerClosed();
  };
  auto writer = WriterArea::Map(control, reply.area_index, region_fd_, tracking, page_tracker,
                                segment_->header.backing_page_bytes, std::move(link));
  if (!writer) {
    Request undo{};
    undo.type = RequestType::kFree;
    undo.area_index = reply.area_index;
    undo.area_generation = reply.area_generation;
    Reply ignored{};
    const std::string why = LastError();
    control_.Call(undo, &ignored);
    return Fail(DSM_ERR_SYSTEM, "{}", why);
  }
  *out = reinterpret_cast<void*>(control->addr);
  std::lock_guard lock(mu_);
  areas_[control->addr].writer = std::move(writer);
  return DSM_OK;
}

int ClientSession::Attach(const char* name, uint32_t timeout_ms, const void** out, size_t* out_size) {
  if (!name || !out) return Fail(DSM_ERR_INVALID, "dsm_attach: name and out must not be NULL");
  if (std::strlen(name) >= kMaxNameBytes) {
    return Fail(DSM_ERR_INVALID, "dsm_attach: name '{}' is longer than {} bytes", name, kMaxNameBytes - 1);
  }
  Request req{};
  req.type = RequestType::kAttach;
  std::strncpy(req.name, name, kMaxNameBytes - 1);
  const uint64_t deadline = MonotonicNs() + uint64_t{timeout_ms} * 1000000;
  Reply reply{};
  for (;;) {
    const int rc = control_.Call(req, &reply);
    if (rc == DSM_OK) break;
    if (rc != DSM_ERR_NOT_FOUND) return rc;
    if (MonotonicNs() >= deadline) {
      return Fail(DSM_ERR_TIMEOUT, "no area named '{}' appeared within {} ms", name, timeout_ms);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kAttachPollMs));
  }
  AreaControl* control = &segment_->areas[reply.area_index];
  auto reader =
      ReaderArea::Map(control, reply.area_index, reply.reader_slot, region_fd_, &segment_->header);
  if (!reader) {
    const std::string why = LastError();
    Request undo{};
    undo.type = RequestType::kFree;
    undo.area_index = reply.area_index;
    undo.area_generation = reply.area_generation;
    Reply ignored{};
    control_.Call(undo, &ignored);
    return Fail(DSM_ERR_SYSTEM, "{}", why);
  }
  *out = reinterpret_cast<const void*>(control->addr);
  if (out_size) *out_size = control->size;
  std::lock_guard lock(mu_);
  areas_[control->addr].reader = std::move(reader);
  return DSM_OK;
}

void ClientSession::DrainRemoteCopies(const AreaControl& control, uint64_t version,
                                      uint64_t deadline_ns) {
  // dsmd stops shipping an area once it is freed: let the hosts that replicate
  // it acknowledge the last version first (bounded; a host that is down does
  // not count: dsmd leaves it out of remote_acked_version).
  if (version == 0 || control.export_enabled.load() == 0) return;
  while (control.remote_acked_version.load() < version && MonotonicNs() < deadline_ns &&
         segment_->header.daemon_alive.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ClientSession::FlushManaged(WriterArea& writer, uint64_t deadline_ns) {
  AreaControl& c = *writer.control();
  while (!writer.ManagedSentWhole() && MonotonicNs() < deadline_ns &&
         segment_->header.daemon_alive.load()) {
    // One version at a time: the next once dsmd has collected this one.
    if (c.managed_residual_version.load(std::memory_order_acquire) >= writer.version()) {
      writer.PublishWaitingLines(MonotonicNs());  // busy: again at the next turn
    }
    control_.RingDoorbell(segment_->header.doorbell_armed);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int ClientSession::Free(const void* p) {
  std::unique_lock lock(mu_);
  auto it = areas_.find(reinterpret_cast<uintptr_t>(p));
  if (it != areas_.end() && it->second.writer) {
    // Lines a managed area's dsmd still holds back go before it stops
    // shipping the area (the lock is held: nothing else may free it meanwhile).
    FlushManaged(*it->second.writer, MonotonicNs() + free_drain_ns_);
    const AreaControl* control = it->second.control();
    const uint64_t version = it->second.writer->version();
    lock.unlock();
    DrainRemoteCopies(*control, version, MonotonicNs() + free_drain_ns_);
    lock.lock();
    it = areas_.find(reinterpret_cast<uintptr_t>(p));  // another thread may have freed it
  }
  if (it == areas_.end()) {
    return Fail(DSM_ERR_INVALID, "dsm_free({}): not the address of an area this process has "
                "(already freed, or never allocated/attached)", p);
  }
  AreaControl* control = it->second.control();
  Request req{};
  req.type = RequestType::kFree;
  req.area_index = it->second.writer ? it->second.writer->index() : it->second.reader->index();
  req.area_generation = control->generation;
  const uint64_t mapped = control->mapped_size;
  ForgetLogCaches(reinterpret_cast<uintptr_t>(p));  // before the log it points to goes
  areas_.erase(it);  // unpins a reader; drops the writer's log
  UnmapRange(reinterpret_cast<uintptr_t>(p), mapped);
  lock.unlock();
  Reply reply{};
  const int rc = control_.Call(req, &reply);
  return rc == DSM_ERR_DAEMON_GONE ? DSM_OK : rc;  // nothing left to release without a daemon
}

bool ClientSession::AnythingDue(uint64_t now_ns) {
  std::lock_guard lock(mu_);
  for (auto& [addr, a] : areas_) {
    if (a.writer ? a.writer->Due(now_ns) : a.reader->Behind()) return true;
  }
  return false;
}

void ClientSession::SyncWork(uint64_t now_ns, const void* forced_area, int* forced_rc) {
  std::lock_guard lock(mu_);
  for (auto& [addr, a] : areas_) {
    const bool forced = forced_area == reinterpret_cast<const void*>(addr);
    if (forced_area && !forced) continue;  // dsm_publish(area) syncs that area only
    if (a.writer) {
      if (!forced && !a.writer->Due(now_ns)) continue;
      const uint64_t t0 = MonotonicNs();
      int rc = a.writer->Publish(now_ns);
      const uint64_t took = MonotonicNs() - t0;
      AreaControl* c = a.writer->control();
      // Another host reads this area: wake dsmd so it ships the version now
      // rather than at its next polling turn (or, if dsmd's pin on the version
      // it ships kept this publish from a buffer, so it lets go of it).
      if ((rc == DSM_OK || rc == DSM_ERR_BUSY) && c->export_enabled.load(std::memory_order_relaxed)) {
        control_.RingDoorbell(segment_->header.doorbell_armed);
      }
      if (rc == DSM_ERR_BUSY && ReleasePinsOfGoneDaemon(*c)) rc = a.writer->Publish(now_ns);
      c->publish_ns_total.fetch_add(took, std::memory_order_relaxed);
      if (took > c->publish_ns_max.load(std::memory_order_relaxed)) c->publish_ns_max.store(took);
      if (forced) *forced_rc = rc;
    } else if (a.reader->Behind()) {
      const int rc = a.reader->MoveToLatest();
      if (forced) *forced_rc = rc;
    }
  }
}

int ClientSession::Service() {
  QuiescenceGate& gate = QuiescenceGate::Instance();
  gate.EnsureRegistered();
  const uint64_t now = MonotonicNs();
  // Enter the gate when a sync is due, or when another thread waits there for us.
  if (!gate.SomeoneWaiting() && !AnythingDue(now)) return DSM_OK;
  const bool ran = gate.RunQuiescent(
      [&] { SyncWork(MonotonicNs(), nullptr, nullptr); }, now + quiesce_timeout_ns_);
  if (!ran) {
    return Fail(DSM_ERR_BUSY, "dsm_service: other threads of this process did not reach a "
                "quiescent point within {} us; mark idle threads with dsm_thread_offline()",
                quiesce_timeout_ns_ / 1000);
  }
  return DSM_OK;
}

int ClientSession::Publish(const void* area) {
  {
    std::lock_guard lock(mu_);
    Area* a = FindLocked(area);
    if (!a || reinterpret_cast<uintptr_t>(area) != a->control()->addr) {
      return Fail(DSM_ERR_INVALID, "dsm_publish({}): not the address of an area of this process", area);
    }
    if (!a->writer) {
      return Fail(DSM_ERR_NOT_OWNER, "dsm_publish: this process reads '{}' but does not write it",
                  a->control()->name);
    }
  }
  int rc = DSM_OK;
  const uint64_t now = MonotonicNs();
  const bool ran = QuiescenceGate::Instance().RunQuiescent(
      [&] { SyncWork(MonotonicNs(), area, &rc); }, now + quiesce_timeout_ns_);
  if (!ran) return Fail(DSM_ERR_BUSY, "dsm_publish: other threads did not reach a quiescent point");
  return rc;
}

int ClientSession::WaitVersion(const void* area, uint64_t version, uint32_t timeout_ms) {
  ReaderArea* reader = nullptr;
  {
    std::lock_guard lock(mu_);
    Area* a = FindLocked(area);
    if (!a) return Fail(DSM_ERR_INVALID, "dsm_wait_version({}): not an area of this process", area);
    if (a->writer) {
      if (a->writer->version() >= version) return DSM_OK;
      return Fail(DSM_ERR_TIMEOUT, "'{}' is written by this process and is at version {}; only "
                  "its own publishes advance it", a->control()->name, a->writer->version());
    }
    reader = a->reader.get();
  }
  const uint64_t deadline = MonotonicNs() + uint64_t{timeout_ms} * 1000000;
  QuiescenceGate& gate = QuiescenceGate::Instance();
  // Online first, so that its sleep takes it offline (and, the process's last
  // online thread, lets dsmd write the next version in place meanwhile).
  gate.EnsureRegistered();
  for (;;) {
    SleepUntilVersionOrDue(*reader, version, deadline);
    // At a quiescent point: move to the version once it exists, and do this
    // process's due syncs meanwhile; back to sleep when none is due and the
    // version is still to come.
    gate.WaitQuiescent(
        [&] {
          return reader->version() >= version ||
                 (UnpackLatest(reader->control()->latest.load()).version < version &&
                  !AnythingDue(MonotonicNs()));
        },
        [&] { return AnythingDue(MonotonicNs()); },
        [&] { SyncWork(MonotonicNs(), nullptr, nullptr); }, deadline);
    if (reader->version() >= version) return DSM_OK;
    if (MonotonicNs() >= deadline) break;
  }
  return Fail(DSM_ERR_TIMEOUT, "'{}' is at version {} after {} ms, waiting for {}{}",
              reader->control()->name, reader->version(), timeout_ms, version,
              reader->control()->state.load() == static_cast<uint32_t>(AreaState::kLive)
                  ? ""
                  : " (its writer is gone)");
}

void ClientSession::SleepUntilVersionOrDue(ReaderArea& reader, uint64_t version,
                                           uint64_t deadline_ns) {
  QuiescenceGate::Instance().Offline();  // this thread reads nothing while it sleeps
  std::vector<AreaControl*> areas;
  std::vector<uint64_t> seen;
  for (;;) {
    // Every area this process reads, the awaited one first: a newer version
    // of any is sync work (its reader moves to it). The sleep ends at the
    // deadline or when a writer area of this process is next due.
    areas.clear();
    seen.clear();
    uint64_t wake = deadline_ns;
    {
      std::lock_guard lock(mu_);
      areas.push_back(reader.control());
      for (auto& [addr, a] : areas_) {
        if (a.writer) {
          wake = std::min(wake, a.writer->next_sync_ns());
        } else if (a.reader.get() != &reader) {
          areas.push_back(a.reader->control());
        }
      }
    }
    for (AreaControl* c : areas) seen.push_back(c->latest.load());
    const uint64_t now = MonotonicNs();
    if (UnpackLatest(seen[0]).version >= version || now >= wake || AnythingDue(now)) return;
    WaitForNewerVersions(areas, seen, wake - now);
  }
}

int ClientSession::Status(const void* area, dsm_area_status* st) {
  if (!st) return Fail(DSM_ERR_INVALID, "dsm_status: st is NULL");
  std::lock_guard lock(mu_);
  Area* a = FindLocked(area);
  if (!a) return Fail(DSM_ERR_INVALID, "dsm_status({}): not an area of this process", area);
  AreaControl* c = a->control();
  std::memset(st, 0, sizeof(*st));
  const auto state = static_cast<AreaState>(c->state.load());
  const uint64_t latest = UnpackLatest(c->latest.load()).version;
  st->latest_version = latest;
  st->staleness_bound_ns = c->staleness_bound_ns;
  st->size = c->size;
  st->writer_pid = c->writer_pid;
  st->writer_alive = state == AreaState::kLive;
  st->freed = state == AreaState::kFreed;
  st->publishes_deferred = c->publishes_deferred.load();
  st->tracking = static_cast<uint8_t>(c->tracking.load());
  st->page_tracker = static_cast<uint8_t>(c->page_tracker.load());
  st->pages_written = c->pages_written.load();
  st->lines_changed = c->lines_changed.load();
  if (a->writer) {
    st->is_writer = 1;
    st->writer_alive = 1;
    st->version = a->writer->version();
    return DSM_OK;  // the writer sees its own writes: no staleness
  }
  StalenessInput in{};
  in.now_ns = MonotonicNs();
  in.seen_version = a->reader->version();
  in.latest_version = latest;
  in.confirmed_ns = c->confirmed_ns.load();
  // (No buffer: the one it mapped was left half written; MoveToLatest maps
  // the latest again at the next quiescent point.)
  const uint32_t buffer = a->reader->buffer();
  in.superseded_ns = buffer < kMaxReaderBuffers ? c->buffer_published_ns[buffer].load() : 0;
  in.bound_ns = c->staleness_bound_ns;
  in.writer_alive = st->writer_alive && segment_->header.daemon_alive.load();
  const Staleness s = ComputeStaleness(in);
  st->version = in.seen_version;
  st->staleness_ns = s.staleness_ns;
  st->stale = s.stale;
  return DSM_OK;
}

int ClientSession::ManagedStatus(const void* area, dsm_managed_status* st) {
  if (!st) return Fail(DSM_ERR_INVALID, "dsm_status_managed: st is NULL");
  std::lock_guard lock(mu_);
  Area* a = FindLocked(area);
  if (!a) return Fail(DSM_ERR_INVALID, "dsm_status_managed({}): not an area of this process", area);
  const AreaControl* c = a->control();
  std::memset(st, 0, sizeof(*st));
  if (c->managed_budget_bytes_per_s == 0) return DSM_OK;
  st->managed = 1;
  st->max_line_age = c->managed_max_line_age;
  st->budget_bytes_per_s = c->managed_budget_bytes_per_s;
  st->as_of_version = c->managed_residual_version.load(std::memory_order_acquire);
  st->residual_lines = c->managed_residual_lines.load(std::memory_order_relaxed);
  st->oldest_lag = c->managed_oldest_lag.load(std::memory_order_relaxed);
  st->exported = c->is_replica != 0 || c->export_enabled.load() != 0;
  return DSM_OK;
}

int ClientSession::Version(const char* fn, const void* area, uint64_t* out) {
  if (!out) return Fail(DSM_ERR_INVALID, "{}: the version pointer is NULL", fn);
  std::lock_guard lock(mu_);
  Area* a = FindLocked(area);
  if (!a) {
    return Fail(DSM_ERR_INVALID, "{}({}): not in an area of this process; pass a pointer "
                "dsm_alloc or dsm_attach gave (and not yet freed)", fn, area);
  }
  *out = a->writer ? a->writer->version() : a->reader->version();
  return DSM_OK;
}

int ClientSession::LogSlow(const void* ptr, size_t len) {
  std::lock_guard lock(mu_);
  Area* a = FindLocked(ptr);
  if (!a || !a->writer) {
    return Fail(DSM_ERR_INVALID, "dsm_log({}, {}): the pointer is not inside an area this "
                "process writes", ptr, len);
  }
  WriterArea& w = *a->writer;
  const uint64_t offset = reinterpret_cast<uintptr_t>(ptr) - w.addr();
  if (len > w.size() - offset) {
    return Fail(DSM_ERR_INVALID, "dsm_log: range of {} bytes at offset {} runs past the end of "
                "'{}' ({} bytes)", len, offset, w.control()->name, w.size());
  }
  ChangeLog& log = w.ThreadLog();
  log.MarkBytes(offset, len);
  FillLogCache(w.addr(), w.size(), log.bits(), log.summary());
  return DSM_OK;
}

bool ClientSession::ReleasePinsOfGoneDaemon(AreaControl& control) {
  if (segment_->header.daemon_alive.load() != 0 && !control_.PeerClosed()) return false;
  ReleaseDaemonPins(control);  // nobody ships from the buffer it pinned any more
  return true;
}

void ClientSession::PublishAll() {
  std::lock_guard lock(mu_);
  // The areas stay exported after we leave (sealed), but as for dsm_free, let
  // other hosts take the last versions before this process is gone.
  const uint64_t deadline = MonotonicNs() + free_drain_ns_;
  for (auto& [addr, a] : areas_) {
    if (!a.writer) continue;
    // Busy because dsmd still ships from a buffer: it lets go at its next turn.
    AreaControl& c = *a.writer->control();
    while (a.writer->Publish(MonotonicNs()) == DSM_ERR_BUSY && c.export_enabled.load() &&
           MonotonicNs() < deadline) {
      control_.RingDoorbell(segment_->header.doorbell_armed);
      ReleasePinsOfGoneDaemon(c);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  for (auto& [addr, a] : areas_) {
    if (a.writer) FlushManaged(*a.writer, deadline);
  }
  for (auto& [addr, a] : areas_) {
    if (a.writer) DrainRemoteCopies(*a.writer->control(), a.writer->version(), deadline);
  }
}

}  // namespace dsm
