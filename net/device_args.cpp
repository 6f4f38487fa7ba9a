#include "net/device_args.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <numeric>
#include <set>

#include "net/tuning.h"

namespace dsm::net {
namespace {

// af_packet geometry (Linux TPACKET_V2, as the 22.11 PMD uses it): the kernel
// places a frame's MAC header 66 bytes into its slot, slots are 16-aligned,
// and the PMD's RX copies framesz - 32 bytes into one mbuf.
constexpr uint32_t kAfPacketSlotOverheadBytes = 66;
constexpr uint32_t kAfPacketSlotAlignBytes = 16;
constexpr uint32_t kAfPacketRxCopyShrinkBytes = 32;
constexpr uint32_t kMaxAfPacketFramesz =
    (kMaxMbufDataRoomBytes - kMbufHeadroomBytes + kAfPacketRxCopyShrinkBytes) /
    kAfPacketSlotAlignBytes * kAfPacketSlotAlignBytes;
constexpr uint32_t kTapMaxMtuBytes = 1500;
constexpr uint32_t kAfXdpMaxMtuBytes = 1500;
constexpr uint32_t kMemifMaxBsize = 65535;
constexpr const char* kMemifDefaultSocket = "/run/memif.sock";
constexpr uint32_t kDefaultDataRoomBytes = 2048 + kMbufHeadroomBytes;  // RTE_MBUF_DEFAULT_BUF_SIZE

uint32_t RoundUp(uint32_t v, uint32_t step) { return (v + step - 1) / step * step; }

class ArgList {
 public:
  explicit ArgList(ParsedDevargs parsed) : parsed_(std::move(parsed)) {}

  const std::string* Find(const std::string& key) const {
    for (const auto& [k, v] : parsed_.args) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  // A given decimal value of `key`: nullopt when absent; sets `error` when not a number.
  std::optional<uint32_t> Number(const std::string& key, std::string* error) const {
    const std::string* v = Find(key);
    if (v == nullptr) return std::nullopt;
    if (v->empty() || v->size() > 9 ||
        !std::all_of(v->begin(), v->end(), [](unsigned char c) { return std::isdigit(c); })) {
      *error = parsed_.name + ": " + key + "=" + *v + " is not a decimal number";
      return std::nullopt;
    }
    return static_cast<uint32_t>(std::stoul(*v));
  }
  void Add(const std::string& key, const std::string& value) {
    parsed_.args.emplace_back(key, value);
  }
  void Add(const std::string& key, uint32_t value) { Add(key, std::to_string(value)); }

  std::string Join() const {
    std::string out = parsed_.name;
    for (const auto& [k, v] : parsed_.args) out += "," + (v.empty() ? k : k + "=" + v);
    return out;
  }
  const std::string& name() const { return parsed_.name; }

 private:
  ParsedDevargs parsed_;
};

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

DeviceKind KindOf(const std::string& name) {
  if (LooksLikePciAddress(name)) return DeviceKind::kPci;
  if (StartsWith(name, "net_af_packet") || StartsWith(name, "eth_af_packet")) {
    return DeviceKind::kAfPacket;
  }
  if (StartsWith(name, "net_af_xdp")) return DeviceKind::kAfXdp;
  if (StartsWith(name, "net_memif")) return DeviceKind::kMemif;
  if (StartsWith(name, "net_tap")) return DeviceKind::kTap;
  if (StartsWith(name, "net_ring") || StartsWith(name, "eth_ring")) return DeviceKind::kRing;
  if (StartsWith(name, "net_pcap") || StartsWith(name, "eth_pcap")) return DeviceKind::kPcap;
  if (StartsWith(name, "net_null") || StartsWith(name, "eth_null")) return DeviceKind::kNull;
  return DeviceKind::kOtherVdev;
}

bool BuildAfPacket(ArgList* args, uint32_t ring_frames, uint32_t page_bytes, DeviceSpec* spec,
                   std::string* error) {
  const std::string& n = args->name();
  const std::string* iface = args->Find("iface");
  if (iface == nullptr || iface->empty()) {
    *error = n + ": needs iface=<kernel interface>, e.g. " + n + ",iface=veth-h1";
    return false;
  }
  spec->iface = *iface;
  std::string num_error;
  const auto qpairs = args->Number("qpairs", &num_error);
  const auto framesz = args->Number("framesz", &num_error);
  const auto blocksz = args->Number("blocksz", &num_error);
  const auto framecnt = args->Number("framecnt", &num_error);
  if (!num_error.empty()) {
    *error = num_error;
    return false;
  }
  if (qpairs && *qpairs != 1) {
    *error = n + ": qpairs=" + std::to_string(*qpairs) + " but the transport uses one queue pair";
    return false;
  }
  if (!qpairs) args->Add("qpairs", 1u);

  const uint32_t need = spec->max_frame_bytes + kAfPacketSlotOverheadBytes;
  const uint32_t largest_mtu = kMaxAfPacketFramesz - kAfPacketSlotOverheadBytes - 14;
  if (need > kMaxAfPacketFramesz) {
    *error = n + ": mtu " + std::to_string(spec->max_frame_bytes - 14) +
             " is too large; af_packet carries at most mtu " + std::to_string(largest_mtu) +
             " (an RX frame must fit one mbuf, whose data room is 16-bit)";
    return false;
  }
  uint32_t fs;
  if (framesz) {
    fs = *framesz;
    if (fs % kAfPacketSlotAlignBytes != 0 || fs < need || fs > kMaxAfPacketFramesz) {
      *error = n + ": framesz=" + std::to_string(fs) + " must be a multiple of 16 between " +
               std::to_string(RoundUp(need, kAfPacketSlotAlignBytes)) + " (frame " +
               std::to_string(spec->max_frame_bytes) + " + 66 bytes of slot header) and " +
               std::to_string(kMaxAfPacketFramesz) +
               "; a smaller slot truncates or drops frames without any counter";
      return false;
    }
  } else {
    // The smallest slot whose block (lcm with the page) stays small, usually
    // a few slots above the minimum (a multiple of the page at worst); near the
    // 16-bit limit, the minimum slot with whatever block it needs.
    fs = RoundUp(need, kAfPacketSlotAlignBytes);
    for (uint32_t c = fs; c <= kMaxAfPacketFramesz; c += kAfPacketSlotAlignBytes) {
      if (std::lcm(c, page_bytes) <= kMaxAfPacketBlockBytes) {
        fs = c;
        break;
      }
    }
    args->Add("framesz", fs);
  }
  uint32_t bs;
  if (blocksz) {
    bs = *blocksz;
    if (bs == 0 || bs % page_bytes != 0 || bs % fs != 0) {
      *error = n + ": blocksz=" + std::to_string(bs) + " must be a multiple of the page size (" +
               std::to_string(page_bytes) +
               ") and an exact multiple of framesz=" + std::to_string(fs) +
               " (otherwise TX stalls silently after ~2049 frames); e.g. " +
               std::to_string(std::lcm(fs, page_bytes));
      return false;
    }
  } else {
    bs = std::lcm(fs, page_bytes);
    args->Add("blocksz", bs);
  }
  const uint32_t per_block = bs / fs;
  uint32_t fc;
  if (framecnt) {
    fc = *framecnt;
    if (fc == 0 || fc % per_block != 0) {
      *error = n + ": framecnt=" + std::to_string(fc) + " must be a positive multiple of the " +
               std::to_string(per_block) + " frames per block (blocksz " + std::to_string(bs) +
               " / framesz " + std::to_string(fs) + ")";
      return false;
    }
  } else {
    const uint32_t floor_frames = (kAfPacketMinRingBytes + fs - 1) / fs;
    fc = RoundUp(std::max({ring_frames, floor_frames, 1u}), per_block);
    args->Add("framecnt", fc);
  }
  spec->framesz = fs;
  spec->blocksz = bs;
  spec->framecnt = fc;
  spec->rx_data_room_bytes = fs - kAfPacketRxCopyShrinkBytes + kMbufHeadroomBytes;
  return true;
}

bool BuildMemif(ArgList* args, uint32_t ring_frames, DeviceSpec* spec, std::string* error) {
  const std::string& n = args->name();
  std::string num_error;
  const auto bsize = args->Number("bsize", &num_error);
  const auto rsize = args->Number("rsize", &num_error);
  if (!num_error.empty()) {
    *error = num_error;
    return false;
  }
  const std::string* zero_copy = args->Find("zero-copy");
  if (zero_copy != nullptr && *zero_copy != "no") {
    *error = n +
             ": zero-copy is not supported (it shares EAL memory with the peer, which the "
             "transport's --no-huge EAL does not have); remove zero-copy=" +
             *zero_copy;
    return false;
  }
  if (bsize) {
    if (*bsize < spec->max_frame_bytes || *bsize > kMemifMaxBsize) {
      *error = n + ": bsize=" + std::to_string(*bsize) + " must be at least the largest frame (" +
               std::to_string(spec->max_frame_bytes) + " bytes for mtu " +
               std::to_string(spec->max_frame_bytes - 14) +
               ") and at most 65535: DPDK 22.11 corrupts frames split across memif buffers";
      return false;
    }
    spec->bsize = *bsize;
  } else {
    spec->bsize = std::min(RoundUp(spec->max_frame_bytes, kMemifBufferRoundBytes), kMemifMaxBsize);
    args->Add("bsize", spec->bsize);
  }
  if (rsize) {
    if (*rsize < 1 || *rsize > kMemifMaxLog2Ring) {
      *error = n + ": rsize=" + std::to_string(*rsize) + " (log2 of the ring size) must be 1.." +
               std::to_string(kMemifMaxLog2Ring);
      return false;
    }
    spec->rsize_log2 = *rsize;
  } else {
    uint32_t log2 = 1;
    while (log2 < kMemifMaxLog2Ring && (1u << log2) < ring_frames) ++log2;
    spec->rsize_log2 = log2;
    args->Add("rsize", log2);
  }
  if (args->Find("socket-abstract") == nullptr) args->Add("socket-abstract", "no");
  const std::string* role = args->Find("role");
  spec->memif_server = role != nullptr && *role == "server";
  if (*args->Find("socket-abstract") == "no") {
    const std::string* socket = args->Find("socket");
    spec->memif_socket_file = socket != nullptr ? *socket : kMemifDefaultSocket;
  }
  spec->rx_data_room_bytes = spec->max_frame_bytes + kMbufHeadroomBytes;
  return true;
}

}  // namespace

bool LooksLikePciAddress(const std::string& name) {
  // [dddd:]bb:dd.f in hex
  size_t i = 0;
  auto hex = [&](size_t count) {
    for (size_t k = 0; k < count; ++k, ++i) {
      if (i >= name.size() || !std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
    }
    return true;
  };
  auto ch = [&](char c) { return i < name.size() && name[i++] == c; };
  if (name.size() == 12) {
    if (!hex(4) || !ch(':')) return false;
  } else if (name.size() != 7) {
    return false;
  }
  return hex(2) && ch(':') && hex(2) && ch('.') && i < name.size() && name[i] >= '0' &&
         name[i] <= '7' && i + 1 == name.size();
}

std::optional<ParsedDevargs> ParseDevargs(const std::string& device, std::string* error) {
  ParsedDevargs out;
  std::set<std::string> seen;
  size_t start = 0;
  bool first = true;
  while (start <= device.size()) {
    size_t end = device.find(',', start);
    if (end == std::string::npos) end = device.size();
    const std::string item = device.substr(start, end - start);
    start = end + 1;
    if (first) {
      out.name = item;
      first = false;
      continue;
    }
    if (item.empty()) {
      *error = "device \"" + device + "\" has an empty argument (two commas in a row?)";
      return std::nullopt;
    }
    const size_t eq = item.find('=');
    std::string key = item.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (!seen.insert(key).second) {
      *error = "device \"" + device + "\" gives " + key + " twice";
      return std::nullopt;
    }
    out.args.emplace_back(std::move(key), std::move(value));
  }
  if (out.name.empty()) {
    *error = "device \"" + device +
             "\" has no name; expected e.g. net_af_packet0,iface=veth0 or a PCI address";
    return std::nullopt;
  }
  return out;
}

PortCounts CountsForMtu(PortCounts counts, uint32_t mtu_bytes, PortCounts floor) {
  const uint64_t frame_bytes = uint64_t{mtu_bytes} + 14;
  if (frame_bytes <= kCountedFrameBytes) return counts;
  auto same_bytes = [&](uint32_t n, uint32_t least) {
    return std::max(least, static_cast<uint32_t>(uint64_t{n} * kCountedFrameBytes / frame_bytes));
  };
  return PortCounts{same_bytes(counts.rx_ring, floor.rx_ring),
                    same_bytes(counts.tx_ring, floor.tx_ring),
                    same_bytes(counts.mbufs, floor.mbufs)};
}

std::optional<DeviceSpec> BuildDeviceSpec(const std::string& device, uint32_t mtu_bytes,
                                          uint32_t ring_frames, std::string* error,
                                          uint32_t page_bytes) {
  if (page_bytes == 0) page_bytes = static_cast<uint32_t>(sysconf(_SC_PAGESIZE));
  std::optional<ParsedDevargs> parsed = ParseDevargs(device, error);
  if (!parsed) return std::nullopt;
  const uint32_t largest_mtu = kMaxMbufDataRoomBytes - kMbufHeadroomBytes - 14;
  if (mtu_bytes < kMinMtuBytes || mtu_bytes > largest_mtu) {
    *error = "mtu_bytes " + std::to_string(mtu_bytes) + " is outside " +
             std::to_string(kMinMtuBytes) + ".." + std::to_string(largest_mtu);
    return std::nullopt;
  }
  DeviceSpec spec;
  spec.kind = KindOf(parsed->name);
  spec.name = parsed->name;
  spec.max_frame_bytes = mtu_bytes + 14;
  spec.rx_data_room_bytes =
      std::max(spec.max_frame_bytes + kMbufHeadroomBytes, kDefaultDataRoomBytes);
  ArgList args(std::move(*parsed));
  switch (spec.kind) {
    case DeviceKind::kAfPacket:
      if (!BuildAfPacket(&args, ring_frames, page_bytes, &spec, error)) return std::nullopt;
      break;
    case DeviceKind::kMemif:
      if (!BuildMemif(&args, ring_frames, &spec, error)) return std::nullopt;
      break;
    case DeviceKind::kTap:
      if (mtu_bytes > kTapMaxMtuBytes) {
        *error = spec.name +
                 ": net_tap has no jumbo frames (largest frame 1522 bytes): use "
                 "mtu_bytes <= 1500, or net_af_packet / net_memif for mtu " +
                 std::to_string(mtu_bytes);
        return std::nullopt;
      }
      if (const std::string* iface = args.Find("iface")) spec.iface = *iface;
      break;
    case DeviceKind::kAfXdp: {
      const std::string* iface = args.Find("iface");
      if (iface == nullptr || iface->empty()) {
        *error = spec.name + ": needs iface=<kernel interface>, e.g. " + spec.name +
                 ",iface=veth-h1";
        return std::nullopt;
      }
      if (mtu_bytes > kAfXdpMaxMtuBytes) {
        *error = spec.name +
                 ": net_af_xdp in DPDK 22.11 has no multi-buffer (one umem chunk per frame): use "
                 "mtu_bytes <= 1500, or net_af_packet / net_memif for mtu " +
                 std::to_string(mtu_bytes);
        return std::nullopt;
      }
      spec.iface = *iface;
      if (args.Find("start_queue") == nullptr) args.Add("start_queue", "0");
      if (args.Find("queue_count") == nullptr) args.Add("queue_count", "1");
      break;
    }
    case DeviceKind::kPci:
      spec.mtu_from_devargs = false;
      if (spec.name.size() == 7) spec.name = "0000:" + spec.name;
      break;
    case DeviceKind::kRing:
    case DeviceKind::kPcap:
    case DeviceKind::kNull:
    case DeviceKind::kOtherVdev:
      break;
  }
  spec.devargs = args.Join();
  return spec;
}

}  // namespace dsm::net
