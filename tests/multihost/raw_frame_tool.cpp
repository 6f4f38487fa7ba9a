// raw_frame_tool: sends crafted libdsm frames (Ethernet + IPv4 + UDP + a DATA
// frame, possibly broken on purpose) through an AF_PACKET raw socket, for the
// bad-input tests of the virtual cluster. Run it inside a host's namespace with
// that host's own addresses, so the bridge's MAC learning is not disturbed:
//
//   scripts/cluster.sh exec 1 --dir DIR -- raw_frame_tool --from 1 --to 2
//       --case bad_checksum --area-index 0 --area-generation 1 --count 50
//   (one command line)
//
// --from/--to fill in MACs and IPv4s of cluster hosts (02:00:c6:12:00:0H,
// 198.18.0.H) and the header's source_host/dest_host; --src-ip and the other
// explicit options override them. --case storm sends --count forged frames of
// every type (storm_frames.h), drawn from --seed, around --version and an
// area of --area-lines lines. --key ID:HEX seals every frame of the data case
// or the storm with that key (as a host of a keyed cluster would, or one
// holding an old or a wrong key). Exit status 0 when every frame was sent.
#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "coherence/wire_format.h"
#include "tests/multihost/raw_frame_sender.h"
#include "tests/multihost/storm_frames.h"

namespace rf = dsm::testing::rawframe;

namespace {

// "ID:HEX" (64 hex digits) as a frame key.
std::optional<dsm::wire::FrameKey> ParseKey(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos || text.size() - colon - 1 != 2 * dsm::wire::kKeyBytes) {
    return std::nullopt;
  }
  dsm::wire::FrameKey k;
  try {
    const unsigned long id = std::stoul(text.substr(0, colon));
    if (id < 1 || id > 255) return std::nullopt;
    k.id = static_cast<uint8_t>(id);
    for (size_t i = 0; i < dsm::wire::kKeyBytes; ++i) {
      k.secret[i] = static_cast<uint8_t>(std::stoul(text.substr(colon + 1 + 2 * i, 2), nullptr, 16));
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return k;
}

// The checksummed frame `plain` laid out and sealed with `seal`'s key (the
// tag after the header); frames too short to have a header stay as they are.
std::vector<uint8_t> SealWithKey(const std::vector<uint8_t>& plain, dsm::wire::FrameSeal* seal) {
  constexpr size_t kHeader = sizeof(dsm::wire::Header);
  if (plain.size() < kHeader) return plain;
  std::vector<uint8_t> out(plain.size() + dsm::wire::kTagBytes);
  std::memcpy(out.data(), plain.data(), kHeader);
  std::memcpy(out.data() + seal->header_bytes(), plain.data() + kHeader, plain.size() - kHeader);
  seal->Seal(out.data(), static_cast<uint32_t>(plain.size() - kHeader));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"raw_frame_tool: send crafted libdsm frames on a raw socket"};
  std::string iface = "dsm0";
  int from = 0;
  int to = 0;
  std::string src_mac, dst_mac, src_ip, dst_ip;
  uint16_t port = rf::kClusterUdpPort;
  std::string case_name = "data";
  int source_host = -1;
  int dest_host = -1;
  rf::DataSpec spec;
  bool full = false;
  uint32_t count = 1;
  uint32_t interval_us = 100;
  bool dry_run = false;

  app.add_option("--iface", iface, "Interface to send on")->capture_default_str();
  app.add_option("--from", from, "Sending cluster host (its MAC, IPv4, source_host)")
      ->check(CLI::Range(1, 63));
  app.add_option("--to", to, "Receiving cluster host (its MAC, IPv4, dest_host)")
      ->check(CLI::Range(1, 63));
  app.add_option("--src-mac", src_mac, "Source MAC (overrides --from)");
  app.add_option("--dst-mac", dst_mac, "Destination MAC (overrides --to)");
  app.add_option("--src-ip", src_ip, "Source IPv4 (overrides --from)");
  app.add_option("--dst-ip", dst_ip, "Destination IPv4 (overrides --to)");
  app.add_option("--port", port, "UDP source and destination port")->capture_default_str();
  app.add_option("--case", case_name,
                 "data, truncated, oversized, bad_checksum, bad_magic, bad_version or storm")
      ->capture_default_str();
  app.add_option("--source-host", source_host, "Header source_host (default: --from)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--dest-host", dest_host, "Header dest_host (default: --to)")
      ->check(CLI::Range(0, 65535));
  std::string incarnation = "0";
  app.add_option("--incarnation", incarnation,
                 "Header incarnation, hex as dsmctl hosts prints it (0: none believed)")
      ->capture_default_str();
  app.add_option("--area-index", spec.area_index)->capture_default_str();
  app.add_option("--area-generation", spec.area_generation)->capture_default_str();
  app.add_option("--version", spec.version)->capture_default_str();
  app.add_option("--base-version", spec.base_version)->capture_default_str();
  app.add_option("--transfer-id", spec.transfer_id)->capture_default_str();
  app.add_flag("--full", full, "Set kFlagFull (the whole area; base ignored)");
  app.add_option("--seq", spec.seq)->capture_default_str();
  app.add_option("--frame-count", spec.frame_count)->capture_default_str();
  app.add_option("--first-line", spec.first_line, "First line of the single run")
      ->capture_default_str();
  app.add_option("--line-count", spec.line_count, "Lines in the run")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--count", count, "Copies to send")->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--interval-us", interval_us, "Pause between copies")
      ->check(CLI::Range(0, 10000000))
      ->capture_default_str();
  app.add_flag("--dry-run", dry_run, "Print the frame in hex instead of sending it");
  std::string key_text;
  app.add_option("--key", key_text, "Seal frames with this key: ID:HEX (64 hex digits)");
  uint64_t seed = 1;
  uint32_t area_lines = 1024;
  app.add_option("--seed", seed, "storm: seed of the forged frames")->capture_default_str();
  app.add_option("--area-lines", area_lines, "storm: lines of the area")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    spec.incarnation = static_cast<uint32_t>(std::stoul(incarnation, nullptr, 16));
  } catch (const std::exception&) {
    std::fprintf(stderr, "raw_frame_tool: --incarnation '%s' is not hex\n", incarnation.c_str());
    return 2;
  }

  dsm::wire::FrameSeal seal;
  if (!key_text.empty()) {
    const auto key = ParseKey(key_text);
    if (!key || !seal.SetKeys(std::span<const dsm::wire::FrameKey>(&*key, 1))) {
      std::fprintf(stderr, "raw_frame_tool: --key must be ID:HEX (id 1-255, 64 hex digits)\n");
      return 2;
    }
  }
  const bool storm = case_name == "storm";
  const auto mutation = storm ? std::optional<rf::Mutation>(rf::Mutation::kNone)
                              : rf::ParseMutation(case_name);
  if (!mutation) {
    std::fprintf(stderr, "raw_frame_tool: unknown --case '%s'\n", case_name.c_str());
    return 2;
  }
  rf::Addresses a;
  if (from) {
    a.src_mac = rf::ClusterHostMac(from);
    a.src_ipv4 = rf::ClusterHostIpv4(from);
  }
  if (to) {
    a.dst_mac = rf::ClusterHostMac(to);
    a.dst_ipv4 = rf::ClusterHostIpv4(to);
  }
  auto parse_mac = [](const std::string& s, rf::Mac* out) {
    if (s.empty()) return true;
    const auto m = rf::ParseMac(s);
    if (m) *out = *m;
    return m.has_value();
  };
  auto parse_ip = [](const std::string& s, uint32_t* out) {
    if (s.empty()) return true;
    const auto ip = rf::ParseIpv4(s);
    if (ip) *out = *ip;
    return ip.has_value();
  };
  if (!parse_mac(src_mac, &a.src_mac) || !parse_mac(dst_mac, &a.dst_mac) ||
      !parse_ip(src_ip, &a.src_ipv4) || !parse_ip(dst_ip, &a.dst_ipv4)) {
    std::fprintf(stderr, "raw_frame_tool: bad MAC or IPv4 address\n");
    return 2;
  }
  if (a.src_ipv4 == 0 || a.dst_ipv4 == 0) {
    std::fprintf(stderr, "raw_frame_tool: give --from/--to or the addresses explicitly\n");
    return 2;
  }
  a.dst_port = port;
  spec.source_host = static_cast<uint16_t>(source_host >= 0 ? source_host : from);
  spec.dest_host = static_cast<uint16_t>(dest_host >= 0 ? dest_host : to);
  if (full) spec.flags |= dsm::wire::kFlagFull;

  if (seal.keyed() && !storm && *mutation != rf::Mutation::kNone) {
    std::fprintf(stderr, "raw_frame_tool: --key seals the data and storm cases only\n");
    return 2;
  }
  const std::vector<uint8_t> plain = rf::BuildPayload(spec, *mutation);
  const std::vector<uint8_t> payload = seal.keyed() ? SealWithKey(plain, &seal) : plain;
  if (dry_run) {
    const auto frame = rf::BuildEthernetFrame(a, 1, payload);
    for (size_t i = 0; i < frame.size(); ++i) std::printf("%02x%s", frame[i], i % 16 == 15 ? "\n" : " ");
    std::printf("\n");
    return 0;
  }
  rf::RawSender sender;
  std::string error;
  if (!sender.Open(iface, &error)) {
    std::fprintf(stderr, "raw_frame_tool: %s\n", error.c_str());
    return 1;
  }
  std::mt19937_64 rng(seed);
  rf::DataSpec storm_base = spec;
  storm_base.first_line = 0;
  storm_base.line_count = area_lines;
  for (uint32_t i = 0; i < count; ++i) {
    std::vector<uint8_t> body = payload;
    if (storm) {
      body = rf::BuildStormPayload(storm_base, &rng);
      if (seal.keyed()) body = SealWithKey(body, &seal);
    }
    const auto frame = rf::BuildEthernetFrame(a, static_cast<uint16_t>(i + 1), body);
    if (!sender.Send(frame, &error)) {
      std::fprintf(stderr, "raw_frame_tool: frame %u of %u: %s\n", i + 1, count, error.c_str());
      return 1;
    }
    if (interval_us && i + 1 < count) {
      std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
    }
  }
  std::printf("raw_frame_tool: sent %u x %s (%zu-byte payload) %s/%s -> %s/%s on %s\n", count,
              storm ? "storm" : rf::MutationName(*mutation), payload.size(), rf::FormatMac(a.src_mac).c_str(),
              rf::FormatIpv4(a.src_ipv4).c_str(), rf::FormatMac(a.dst_mac).c_str(),
              rf::FormatIpv4(a.dst_ipv4).c_str(), iface.c_str());
  return 0;
}
