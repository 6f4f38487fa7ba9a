#include "tests/multihost/storm_frames.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>

#include "coherence/constants.h"
#include "coherence/wire_format.h"

namespace dsm::testing::rawframe {
namespace {

class Draw {
 public:
  explicit Draw(std::mt19937_64* rng) : rng_(*rng) {}
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool Coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  uint64_t Bits() { return rng_(); }
  // Near `usual` mostly; now and then an extreme or random value.
  uint64_t Field64(uint64_t usual) {
    switch (Below(10)) {
      case 0: return 0;
      case 1: return std::numeric_limits<uint64_t>::max();
      case 2: return uint64_t{1} << 63;
      case 3: return rng_();
      case 4: return usual + Below(2'000'000);
      default: return usual + Below(8) - 4;
    }
  }
  uint32_t Field32(uint32_t usual) {
    switch (Below(8)) {
      case 0: return 0;
      case 1: return std::numeric_limits<uint32_t>::max();
      case 2: return static_cast<uint32_t>(rng_());
      default: return usual + static_cast<uint32_t>(Below(4));
    }
  }

 private:
  std::mt19937_64& rng_;
};

void AppendBytes(std::vector<uint8_t>* out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

void AppendGarbage(std::vector<uint8_t>* out, size_t n, Draw& d) {
  for (size_t i = 0; i < n; ++i) out->push_back(static_cast<uint8_t>(d.Bits()));
}

}  // namespace

std::vector<uint8_t> BuildStormPayload(const DataSpec& base, std::mt19937_64* rng) {
  Draw d(rng);
  const uint32_t area_lines = base.first_line + base.line_count;
  wire::Header h{};
  h.magic = wire::kMagic;
  h.protocol_version = wire::kProtocolVersion;
  static constexpr wire::FrameType kTypes[] = {
      wire::FrameType::kData,      wire::FrameType::kData,      wire::FrameType::kData,
      wire::FrameType::kAck,       wire::FrameType::kHeartbeat, wire::FrameType::kDirectory,
      wire::FrameType::kDirectory, wire::FrameType::kSubscribe, wire::FrameType::kHello,
      wire::FrameType::kHelloReply};
  const wire::FrameType type = kTypes[d.Below(std::size(kTypes))];
  h.type = d.Coin(0.02) ? static_cast<uint8_t>(d.Bits()) : static_cast<uint8_t>(type);
  h.source_host = d.Coin(0.9) ? base.source_host : static_cast<uint16_t>(d.Bits());
  h.dest_host = d.Coin(0.8)   ? base.dest_host
                : d.Coin(0.5) ? wire::kAllHosts
                              : static_cast<uint16_t>(d.Bits());
  h.area_index = d.Coin(0.8) ? base.area_index : d.Field32(base.area_index);
  h.area_generation = d.Coin(0.8) ? base.area_generation : d.Field32(base.area_generation);
  h.version = d.Field64(base.version);
  h.base_version = d.Coin(0.5) ? d.Field64(base.version) : d.Below(base.version + 1);
  h.frame_count = d.Coin(0.7) ? 1 + static_cast<uint32_t>(d.Below(4)) : d.Field32(8);
  h.seq = d.Coin(0.8) ? static_cast<uint32_t>(d.Below(h.frame_count == 0 ? 1 : h.frame_count))
                      : d.Field32(0);
  h.flags = static_cast<uint16_t>(d.Coin(0.7) ? d.Below(4) : d.Bits());
  h.incarnation = d.Coin(0.85) ? base.incarnation : static_cast<uint32_t>(d.Bits());
  h.transfer_id = d.Coin(0.5) ? base.transfer_id + static_cast<uint32_t>(d.Below(4))
                              : static_cast<uint32_t>(d.Bits());

  std::vector<uint8_t> payload;
  switch (type) {
    case wire::FrameType::kData: {
      const uint16_t runs = static_cast<uint16_t>(1 + d.Below(3));
      h.run_count = d.Coin(0.9) ? runs : static_cast<uint16_t>(d.Bits());
      std::vector<uint32_t> counts;
      for (uint16_t i = 0; i < runs; ++i) {
        wire::Run r;
        r.first_line = d.Coin(0.85) ? static_cast<uint32_t>(d.Below(area_lines)) : d.Field32(area_lines);
        r.line_count = d.Coin(0.9) ? 1 + static_cast<uint32_t>(d.Below(4)) : d.Field32(1);
        AppendBytes(&payload, &r, sizeof(r));
        counts.push_back(r.line_count);
      }
      for (uint32_t c : counts) AppendGarbage(&payload, std::min<size_t>(c, 4) * kLineBytes, d);
      break;
    }
    case wire::FrameType::kAck: {
      const size_t n = d.Below(9);
      for (size_t i = 0; i < n; ++i) {
        const wire::SeqRange r{d.Field32(0), d.Field32(1)};
        AppendBytes(&payload, &r, sizeof(r));
      }
      break;
    }
    case wire::FrameType::kHeartbeat: {
      const wire::HeartbeatBody b{d.Bits(), d.Field64(1u << 30), d.Field64(1u << 30)};
      AppendBytes(&payload, &b, sizeof(b));
      break;
    }
    case wire::FrameType::kDirectory: {
      const size_t n = d.Below(3);
      for (size_t i = 0; i < n; ++i) {
        wire::DirectoryEntry e{};
        std::snprintf(e.name, sizeof(e.name), "%s", d.Coin(0.5) ? "bf/area" : "storm/area");
        e.area_index = d.Coin(0.7) ? base.area_index : d.Field32(base.area_index);
        e.area_generation = d.Coin(0.7) ? base.area_generation : d.Field32(1);
        e.addr = d.Field64(0);
        e.size = d.Field64(uint64_t{area_lines} * kLineBytes);
        e.mapped_size = d.Field64(uint64_t{area_lines} * kLineBytes);
        e.sync_interval_us = d.Field32(1000);
        e.staleness_bound_ms = d.Field32(100);
        e.state = static_cast<uint32_t>(d.Below(5));
        e.reader_buffers = d.Field32(2);
        e.latest_version = d.Field64(base.version);
        e.confirmed_age_ns = d.Field64(0);
        AppendBytes(&payload, &e, sizeof(e));
      }
      break;
    }
    case wire::FrameType::kHello:
    case wire::FrameType::kHelloReply: {
      const wire::HelloBody b{d.Bits()};
      AppendBytes(&payload, &b, sizeof(b));
      break;
    }
    case wire::FrameType::kSubscribe:
      break;
  }
  // What a bad NIC or a mutated capture does to the bytes.
  switch (d.Below(20)) {
    case 0:  // bit flips
      for (int i = 0; i < 3 && !payload.empty(); ++i) {
        payload[d.Below(payload.size())] ^= static_cast<uint8_t>(1u << d.Below(8));
      }
      break;
    case 1:  // truncated
      payload.resize(d.Below(payload.size() + 1));
      break;
    case 2:  // extended
      AppendGarbage(&payload, 1 + d.Below(64), d);
      break;
    case 3:  // garbage
      payload.clear();
      AppendGarbage(&payload, d.Below(1400), d);
      break;
    default:
      break;
  }
  std::vector<uint8_t> out(sizeof(h) + payload.size());
  std::memcpy(out.data(), &h, sizeof(h));
  if (!payload.empty()) std::memcpy(out.data() + sizeof(h), payload.data(), payload.size());
  wire::Seal(out.data(), static_cast<uint32_t>(payload.size()));
  // payload_bytes disagreeing with the bytes that follow, resealed (a frame
  // built wrong), or a checksum broken after sealing (an accident).
  if (d.Coin(0.03)) {
    wire::Header* hp = reinterpret_cast<wire::Header*>(out.data());
    hp->payload_bytes = static_cast<uint16_t>(hp->payload_bytes + 1 + d.Below(16));
  } else if (d.Coin(0.02)) {
    out.back() ^= 0x40;
  }
  return out;
}

}  // namespace dsm::testing::rawframe
