#include "daemon/area_directory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "coherence/version_publisher.h"
#include "dsm/dsm.h"
#include "libdsm/contract/region_limits.h"
#include "libdsm/contract/stage_layout.h"

namespace dsm {

namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// The addresses an area of `mapped` bytes holds in its origin's slice.
uint64_t AddressBytes(uint64_t mapped) { return RoundUp(mapped, kAreaAddressGranuleBytes); }

bool ValidName(const char* name, std::string* why) {
  const size_t len = strnlen(name, kMaxNameBytes);
  if (len == 0) {
    *why = "area name is empty";
    return false;
  }
  if (len >= kMaxNameBytes) {
    *why = fmt::format("area name is longer than {} bytes", kMaxNameBytes - 1);
    return false;
  }
  for (size_t i = 0; i < len; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c <= ' ' || c >= 0x7f) {
      *why = "area names use printable ASCII without spaces";
      return false;
    }
  }
  return true;
}

DirectoryResult Error(int status, std::string message) {
  DirectoryResult r;
  r.status = status;
  r.message = std::move(message);
  return r;
}

}  // namespace

AreaDirectory::AreaDirectory(ControlSegment* segment, const Backing& backing)
    : segment_(segment),
      backing_(backing),
      address_alloc_(segment->header.slice_bytes),
      backing_alloc_(backing.bytes),
      retired_(kMaxAreas, false) {}

DirectoryResult AreaDirectory::Alloc(const Client& client, const Request& req, uint64_t now_ns) {
  std::string why;
  if (!ValidName(req.name, &why)) return Error(DSM_ERR_INVALID, why);
  const std::string name(req.name);
  if (req.size == 0) return Error(DSM_ERR_INVALID, "area size is 0");
  const uint32_t buffers = req.reader_buffers == 0 ? kDefaultReaderBuffers : req.reader_buffers;
  if (buffers < 2 || buffers > kMaxReaderBuffers) {
    return Error(DSM_ERR_INVALID,
                 fmt::format("reader_buffers must be 2..{}, got {}", kMaxReaderBuffers, buffers));
  }
  if (req.managed_budget_bytes_per_s != 0 && !IsManagedElement(req.managed_element)) {
    return Error(DSM_ERR_INVALID,
                 fmt::format("dsm_managed_opts.element {} is not a dsm_element ({})",
                             req.managed_element, kManagedElementsHelp));
  }
  const uint64_t page = backing_.page_bytes;
  const uint64_t copies = 1 + buffers;
  if (req.size > backing_.bytes / copies) {
    return Error(DSM_ERR_NO_SPACE,
                 fmt::format("area of {} bytes cannot fit: it needs {} copies and the host's "
                             "backing holds {} bytes (dsmd --region-size)",
                             req.size, copies, backing_.bytes));
  }
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    AreaControl& old = area(it->second);
    if (old.state.load() == static_cast<uint32_t>(AreaState::kLive)) {
      return Error(DSM_ERR_EXISTS, fmt::format("area '{}' already exists (writer pid {})", name,
                                               old.writer_pid));
    }
    Unname(it->second);  // the writer is gone: a restarted writer may take the name
  }
  const std::optional<uint32_t> slot = FreeSlot();
  if (!slot) {
    return Error(DSM_ERR_NO_SPACE, fmt::format("the host has {} areas, the maximum", kMaxAreas));
  }
  const uint32_t index = *slot;
  const uint64_t mapped = RoundUp(req.size, page);
  const uint64_t export_pages = (req.size + kPageBytes - 1) / kPageBytes;
  const uint64_t export_bytes = RoundUp(2 * export_pages * sizeof(uint64_t), page);
  const uint64_t stage_bytes =
      stages_ && req.tracking == DSM_TRACK_LOG ? StageGeometryFor(req.size, page).bytes : 0;
  const uint64_t backing_bytes = mapped * copies + export_bytes + stage_bytes;
  const uint64_t addr_bytes = AddressBytes(mapped);
  const auto addr_off = address_alloc_.Allocate(addr_bytes, kAreaAddressGranuleBytes);
  if (!addr_off) {
    return Error(DSM_ERR_NO_SPACE,
                 fmt::format("this host's address slice is full: {} bytes asked, largest free "
                             "range {} bytes",
                             addr_bytes, address_alloc_.largest_free()));
  }
  const auto back_off = backing_alloc_.Allocate(backing_bytes, page);
  if (!back_off) {
    address_alloc_.Release(*addr_off, addr_bytes);
    return Error(DSM_ERR_NO_SPACE,
                 fmt::format("the host's backing memory is full: area '{}' needs {} bytes ({} "
                             "copies), {} of {} bytes free (raise dsmd --region-size)",
                             name, backing_bytes, copies, backing_alloc_.free_bytes(),
                             backing_alloc_.capacity()));
  }
  const ControlHeader& hdr = segment_->header;
  AreaLayout l;
  l.name = name;
  l.addr = hdr.slice_base + *addr_off;
  l.size = req.size;
  l.mapped_size = mapped;
  l.buffers = buffers;
  l.backing_offset = *back_off;
  l.export_pages = export_pages;
  l.export_bytes = export_bytes;
  l.stage_bytes = stage_bytes;
  l.sync_interval_ns = req.sync_interval_us != 0 ? uint64_t{req.sync_interval_us} * 1000
                                                 : hdr.default_sync_interval_ns;
  if (req.managed_budget_bytes_per_s != 0) {
    l.managed_budget_bytes_per_s = req.managed_budget_bytes_per_s;
    l.managed_max_line_age = req.managed_max_line_age;
    l.managed_element = req.managed_element != 0 ? req.managed_element : uint32_t{DSM_ELEMENT_FLOAT32};
  }
  l.staleness_bound_ns = req.staleness_bound_ms != 0 ? uint64_t{req.staleness_bound_ms} * 1000000
                                                     : hdr.default_staleness_bound_ns;
  l.writer_pid = client.pid;
  l.writer_client = client.id;
  l.owner_host = hdr.host_id;
  l.confirmed_ns = now_ns;
  StartArea(index, l, now_ns);
  const AreaControl& a = area(index);
  by_name_[name] = index;
  ++listing_changes_;
  DirectoryResult r;
  r.area_index = index;
  r.area_generation = a.generation;
  return r;
}

DirectoryResult AreaDirectory::Attach(const Client& client, const Request& req) {
  std::string why;
  if (!ValidName(req.name, &why)) return Error(DSM_ERR_INVALID, why);
  auto it = by_name_.find(req.name);
  if (it == by_name_.end()) {
    return Error(DSM_ERR_NOT_FOUND, fmt::format("no area named '{}' on this host", req.name));
  }
  AreaControl& a = area(it->second);
  if (a.writer_client == client.id &&
      a.state.load() == static_cast<uint32_t>(AreaState::kLive)) {
    return Error(DSM_ERR_INVALID,
                 fmt::format("this process is the writer of '{}' and already maps it", req.name));
  }
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    if (a.reader_client[s].load() == client.id) {
      return Error(DSM_ERR_EXISTS, fmt::format("this process already attached '{}'", req.name));
    }
  }
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    if (a.reader_client[s].load() == 0) {
      a.reader_pin[s].store(kNoPins);
      a.reader_client[s].store(client.id);
      DirectoryResult r;
      r.area_index = it->second;
      r.area_generation = a.generation;
      r.reader_slot = s;
      return r;
    }
  }
  return Error(DSM_ERR_NO_SPACE, fmt::format("area '{}' has {} readers on this host, the maximum",
                                             req.name, kMaxReadersPerArea));
}

DirectoryResult AreaDirectory::Free(const Client& client, const Request& req) {
  if (req.area_index >= kMaxAreas) return Error(DSM_ERR_INVALID, "no such area");
  AreaControl& a = area(req.area_index);
  if (a.generation != req.area_generation ||
      a.state.load() == static_cast<uint32_t>(AreaState::kFree)) {
    return Error(DSM_ERR_INVALID, "the area was already freed");
  }
  if (a.writer_client == client.id && a.state.load() == static_cast<uint32_t>(AreaState::kLive)) {
    Unname(req.area_index);
    a.state.store(static_cast<uint32_t>(AreaState::kFreed));
    ReleaseBackingMemory(backing_, a.writer_offset, a.mapped_size);
    ReleaseIfUnused(req.area_index);
    return {};
  }
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    if (a.reader_client[s].load() == client.id) {
      a.reader_pin[s].store(kNoPins);
      a.reader_client[s].store(0);
      ReleaseIfUnused(req.area_index);
      return {};
    }
  }
  return Error(DSM_ERR_INVALID, "this process neither writes nor reads that area");
}

void AreaDirectory::ClientGone(const Client& client) {
  for (uint32_t i = 0; i < kMaxAreas; ++i) {
    AreaControl& a = area(i);
    const auto state = static_cast<AreaState>(a.state.load());
    if (state == AreaState::kFree) continue;
    for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
      if (a.reader_client[s].load() == client.id) {
        a.reader_pin[s].store(kNoPins);
        a.reader_client[s].store(0);
      }
    }
    if (state == AreaState::kLive && a.writer_client == client.id) {
      // Readers keep the last complete version; the writer copy is no longer needed.
      a.state.store(static_cast<uint32_t>(AreaState::kSealed));
      ++listing_changes_;
      ReleaseBackingMemory(backing_, a.writer_offset, a.mapped_size);
      continue;  // a sealed area stays attachable by name
    }
    ReleaseIfUnused(i);
  }
}

std::optional<uint32_t> AreaDirectory::ReserveDaemonSlot(uint32_t index) {
  AreaControl& a = area(index);
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    if (a.reader_client[s].load() == kDaemonClientId) return s;
  }
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    if (a.reader_client[s].load() == 0) {
      a.reader_pin[s].store(kNoPins);
      a.reader_client[s].store(kDaemonClientId);
      return s;
    }
  }
  return std::nullopt;
}

std::optional<uint32_t> AreaDirectory::CreateReplica(const wire::DirectoryEntry& origin,
                                                     uint16_t origin_host, uint64_t now_ns,
                                                     std::string* error) {
  const uint64_t page = backing_.page_bytes;
  const uint32_t buffers = origin.reader_buffers >= 2 && origin.reader_buffers <= kMaxReaderBuffers
                               ? origin.reader_buffers
                               : kDefaultReaderBuffers;
  // Each host rounds the area up to its own backing page; the origin holds
  // the addresses up to the next granule, so the rounding stays in the area's range.
  const uint64_t mapped = RoundUp(origin.size, page);
  if (origin.addr % page != 0 || mapped > AddressBytes(origin.mapped_size)) {
    *error = fmt::format("its address {:#x} or size {} does not fit this host's {} byte backing "
                         "pages (is the origin's dsmd older than this one?)",
                         origin.addr, origin.size, page);
    return std::nullopt;
  }
  const std::optional<uint32_t> slot = FreeSlot();
  if (!slot) {
    *error = "this host has the maximum number of areas";
    return std::nullopt;
  }
  const uint32_t index = *slot;
  // A staging copy (where the writer copy would be) and the reader buffers.
  const uint64_t bytes = mapped * (1 + buffers);
  const auto back_off = backing_alloc_.Allocate(bytes, page);
  if (!back_off) {
    *error = fmt::format("the backing memory is full ({} bytes needed, {} free; raise dsmd "
                         "--region-size)", bytes, backing_alloc_.free_bytes());
    return std::nullopt;
  }
  AreaLayout l;
  l.name = std::string_view(origin.name, strnlen(origin.name, kMaxNameBytes - 1));
  l.addr = origin.addr;
  l.size = origin.size;
  l.mapped_size = mapped;
  l.buffers = buffers;
  l.backing_offset = *back_off;
  l.sync_interval_ns = uint64_t{origin.sync_interval_us} * 1000;
  l.staleness_bound_ns = uint64_t{origin.staleness_bound_ms} * 1000000;
  l.writer_client = kDaemonClientId;
  l.owner_host = origin_host;
  l.is_replica = true;
  l.origin_host = origin_host;
  l.origin_index = origin.area_index;
  l.origin_generation = origin.area_generation;
  l.confirmed_ns = 0;  // not confirmed until a version arrives
  l.managed_budget_bytes_per_s = origin.managed_budget_bytes_per_s;
  l.managed_max_line_age = origin.managed_max_line_age;
  l.managed_element = origin.managed_element;
  StartArea(index, l, now_ns);
  return index;
}

bool AreaDirectory::NameReplica(uint32_t index) {
  const std::string name(area(index).name);
  if (by_name_.count(name)) return false;  // a local area of that name wins
  by_name_[name] = index;
  return true;
}

void AreaDirectory::SetReplicaWriterAlive(uint32_t index, bool alive) {
  if (retired_[index]) return;
  AreaControl& a = area(index);
  const auto state = static_cast<AreaState>(a.state.load());
  if (alive && state == AreaState::kSealed) a.state.store(static_cast<uint32_t>(AreaState::kLive));
  if (!alive && state == AreaState::kLive) a.state.store(static_cast<uint32_t>(AreaState::kSealed));
}

void AreaDirectory::RetireReplica(uint32_t index, bool freed) {
  AreaControl& a = area(index);
  if (!a.is_replica || a.state.load() == static_cast<uint32_t>(AreaState::kFree)) return;
  if (Named(index)) by_name_.erase(a.name);
  retired_[index] = true;
  a.state.store(static_cast<uint32_t>(freed ? AreaState::kFreed : AreaState::kSealed));
  ReleaseIfUnused(index);
}

void AreaDirectory::UnnameReplica(uint32_t index) {
  if (area(index).is_replica && Named(index)) by_name_.erase(area(index).name);
}

bool AreaDirectory::Named(uint32_t index) const {
  auto it = by_name_.find(segment_->areas[index].name);
  return it != by_name_.end() && it->second == index;
}

std::optional<uint32_t> AreaDirectory::FreeSlot() {
  for (uint32_t i = 0; i < kMaxAreas; ++i) {
    if (area(i).state.load() == static_cast<uint32_t>(AreaState::kFree)) return i;
  }
  return std::nullopt;
}

void AreaDirectory::StartArea(uint32_t index, const AreaLayout& l, uint64_t now_ns) {
  AreaControl& a = area(index);
  retired_[index] = false;
  segment_->header.backing_used_bytes.store(backing_alloc_.capacity() - backing_alloc_.free_bytes());
  a.generation += 1;
  std::memset(a.name, 0, sizeof(a.name));
  std::memcpy(a.name, l.name.data(), std::min(l.name.size(), sizeof(a.name) - 1));
  a.addr = l.addr;
  a.size = l.size;
  a.mapped_size = l.mapped_size;
  a.writer_pid = l.writer_pid;
  a.writer_client = l.writer_client;
  a.owner_host = l.owner_host;
  a.buffer_count = l.buffers;
  a.sync_interval_ns = l.sync_interval_ns;
  a.staleness_bound_ns = l.staleness_bound_ns;
  a.writer_offset = l.backing_offset;
  const uint64_t copies = 1 + l.buffers;
  for (uint32_t b = 0; b < kMaxReaderBuffers; ++b) {
    a.buffer_offset[b] = b < l.buffers ? l.backing_offset + (1 + b) * l.mapped_size : 0;
  }
  a.is_replica = l.is_replica ? 1 : 0;
  a.origin_host = l.is_replica ? l.origin_host : l.owner_host;
  a.origin_index = l.is_replica ? l.origin_index : index;
  a.origin_generation = l.is_replica ? l.origin_generation : a.generation;
  a.export_offset = l.export_pages != 0 ? l.backing_offset + l.mapped_size * copies : 0;
  a.export_pages = l.export_pages;
  a.export_bytes = l.export_bytes;
  a.stage_offset =
      l.stage_bytes != 0 ? l.backing_offset + l.mapped_size * copies + l.export_bytes : 0;
  a.stage_bytes = l.stage_bytes;
  a.backing_bytes = l.mapped_size * copies + l.export_bytes + l.stage_bytes;
  a.stage_state.store(static_cast<uint32_t>(StageState::kEmpty));
  a.stage_kind = 0;
  a.stage_version = 0;
  a.stage_runs = 0;
  a.stage_lines = 0;
  a.stage_posted_ns = 0;
  a.stage_blocked.store(0);
  a.stage_wanted.store(0);
  a.managed_budget_bytes_per_s = l.managed_budget_bytes_per_s;
  a.managed_max_line_age = l.managed_max_line_age;
  a.managed_element = l.managed_element;
  a.managed_residual_lines.store(0);
  a.managed_oldest_lag.store(0);
  a.managed_residual_version.store(0);
  a.export_enabled.store(0);
  a.export_index.store(0);
  a.export_seq.store(0);
  a.export_version[0].store(0);
  a.export_version[1].store(0);
  for (uint32_t b = 0; b < kMaxReaderBuffers; ++b) {
    a.buffer_version[b].store(0);
    a.buffer_published_ns[b].store(now_ns);
  }
  a.latest.store(PackLatest(0, 0));
  a.in_place_buffer.store(0);
  a.remote_acked_version.store(UINT64_MAX);  // no remote host to wait for
  a.spare_wanted.store(0);
  a.confirmed_ns.store(l.confirmed_ns);
  a.publishes.store(0);
  a.publishes_deferred.store(0);
  a.bytes_published.store(0);
  a.bytes_caught_up.store(0);
  a.staged_publishes.store(0);
  a.staged_in_place.store(0);
  a.staged_forecast_hits.store(0);
  a.publish_ns_total.store(0);
  a.publish_ns_max.store(0);
  a.tracking.store(0);
  a.page_tracker.store(0);
  a.pages_written.store(0);
  a.lines_changed.store(0);
  for (uint32_t s = 0; s < kMaxReadersPerArea; ++s) {
    a.reader_pin[s].store(kNoPins);
    a.reader_client[s].store(0);
  }
  a.state.store(static_cast<uint32_t>(AreaState::kLive), std::memory_order_release);
}

bool AreaDirectory::HasReaders(const AreaControl& a) const {
  // dsmd's own slot (shipping to other hosts) does not keep an area alive.
  return std::any_of(std::begin(a.reader_client), std::end(a.reader_client),
                     [](const std::atomic<uint32_t>& c) {
                       const uint32_t id = c.load();
                       return id != 0 && id != kDaemonClientId;
                     });
}

void AreaDirectory::ReleaseIfUnused(uint32_t index) {
  AreaControl& a = area(index);
  const auto state = static_cast<AreaState>(a.state.load());
  const bool gone = state == AreaState::kFreed || (state == AreaState::kSealed && retired_[index]);
  if (gone && !HasReaders(a)) Release(index);
}

void AreaDirectory::Unname(uint32_t index) {
  AreaControl& a = area(index);
  by_name_.erase(a.name);
  ++listing_changes_;
  if (a.state.load() == static_cast<uint32_t>(AreaState::kSealed)) {
    a.state.store(static_cast<uint32_t>(AreaState::kFreed));
    ReleaseIfUnused(index);
  }
}

void AreaDirectory::Release(uint32_t index) {
  AreaControl& a = area(index);
  ReleaseBackingMemory(backing_, a.writer_offset, a.backing_bytes);
  backing_alloc_.Release(a.writer_offset, a.backing_bytes);
  segment_->header.backing_used_bytes.store(backing_alloc_.capacity() - backing_alloc_.free_bytes());
  // A replica sits at its origin's address, in another host's slice.
  if (!a.is_replica) {
    address_alloc_.Release(a.addr - segment_->header.slice_base, AddressBytes(a.mapped_size));
  }
  retired_[index] = false;
  a.state.store(static_cast<uint32_t>(AreaState::kFree));
}

}  // namespace dsm
