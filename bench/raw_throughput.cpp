// raw_throughput: frames between two DPDK ports through net::Transport and
// nothing else; the reference that replication benchmarks are reported
// against (the raw packet throughput of the same virtual device). One sender, one receiver, usually in two network namespaces:
//
//   ip netns exec h2 raw_throughput --role recv --device net_af_packet0,iface=veth-h2
//       --mac 02:00:00:00:00:02 --ip 198.18.0.2 --peer-mac 02:00:00:00:00:01
//       --peer-ip 198.18.0.1 --mtu 9000 --seconds 5 &
//   ip netns exec h1 raw_throughput --role send --device net_af_packet0,iface=veth-h1
//       --mac 02:00:00:00:00:01 --ip 198.18.0.1 --peer-mac 02:00:00:00:00:02
//       --peer-ip 198.18.0.2 --mtu 9000 --seconds 5
//
// Every payload carries a sequence number and an XXH3 checksum over the rest;
// the receiver counts lost, duplicated and out-of-order frames and frames
// whose checksum fails. When the sender is done it sends end markers with the
// number of frames it sent, so that losses at the tail are counted too.
// Rates: frames/s and Gbit/s of Ethernet frames (without preamble and FCS),
// the sender's over its sending time, the receiver's from its first to its
// last frame.
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/host_table.h"
#include "net/transport.h"

namespace dsm::net {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kDataMagic = 0x52415744;  // "DWAR"
constexpr uint32_t kEndMagic = 0x444e4557;   // "WEND"
constexpr size_t kHeaderBytes = 4 + 4 + 8;   // magic, bytes, seq
constexpr size_t kMinPayloadBytes = kHeaderBytes + 8;
constexpr size_t kFrameOverheadBytes = 14 + 20 + 8;  // Ethernet + IPv4 + UDP
constexpr uint16_t kSenderHost = 1;
constexpr uint16_t kReceiverHost = 2;
constexpr int kEndMarkers = 20;
constexpr uint32_t kBurstFrames = 32;

volatile std::sig_atomic_t stop_requested = 0;

struct Options {
  std::string role;
  std::string device;
  std::string mac, ip, peer_mac, peer_ip;
  uint32_t mtu = 1500;
  double seconds = 5;
  uint32_t frame_bytes = 0;  // 0: the largest the MTU allows
  bool json = false;
  std::string file_prefix;
  std::vector<std::string> eal_args;
  uint16_t udp_port = 7400;
  double pace_gbps = 0;
  int group = -1;
  uint32_t rx_ring = 4096;
  uint32_t idle_sleep_us = 50;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The payload: magic, total bytes, sequence number, a filler that changes
// with the sequence number, and XXH3-64 of everything before the checksum.
void FillPayload(uint8_t* p, size_t bytes, uint64_t seq, const std::vector<uint8_t>& filler) {
  const uint32_t magic = kDataMagic;
  const uint32_t n = static_cast<uint32_t>(bytes);
  std::memcpy(p, &magic, 4);
  std::memcpy(p + 4, &n, 4);
  std::memcpy(p + 8, &seq, 8);
  const size_t body = bytes - kMinPayloadBytes;
  std::memcpy(p + kHeaderBytes, filler.data() + seq % 4096, body);
  const uint64_t h = XXH3_64bits(p, bytes - 8);
  std::memcpy(p + bytes - 8, &h, 8);
}

struct Receipt {
  uint64_t frames = 0;  // valid data frames, duplicates included
  uint64_t bytes = 0;   // their Ethernet bytes
  uint64_t duplicated = 0;
  uint64_t out_of_order = 0;
  uint64_t bad_checksum = 0;
  uint64_t highest = 0;
  bool any = false;
  int64_t sender_total = -1;  // from the end markers
  Clock::time_point first, last;
  std::vector<uint8_t> seen;  // one byte per sequence number

  void Data(std::span<const uint8_t> p) {
    uint32_t magic = 0, n = 0;
    if (p.size() < kMinPayloadBytes) {
      ++bad_checksum;
      return;
    }
    std::memcpy(&magic, p.data(), 4);
    std::memcpy(&n, p.data() + 4, 4);
    uint64_t h = 0;
    std::memcpy(&h, p.data() + p.size() - 8, 8);
    if (n != p.size() || h != XXH3_64bits(p.data(), p.size() - 8)) {
      ++bad_checksum;
      return;
    }
    uint64_t seq = 0;
    std::memcpy(&seq, p.data() + 8, 8);
    if (magic == kEndMagic) {
      sender_total = static_cast<int64_t>(seq);
      return;
    }
    if (magic != kDataMagic) {
      ++bad_checksum;
      return;
    }
    const Clock::time_point now = Clock::now();
    if (!any) first = now;
    last = now;
    ++frames;
    bytes += p.size() + kFrameOverheadBytes;
    if (seq >= seen.size()) seen.resize(std::max<size_t>(seq + 1, seen.size() * 2), 0);
    if (seen[seq]) {
      ++duplicated;
      return;
    }
    seen[seq] = 1;
    if (any && seq < highest) ++out_of_order;
    if (!any || seq > highest) highest = seq;
    any = true;
  }
};

std::unique_ptr<Transport> Open(const Options& o, std::string* error) {
  const auto mac = ParseMac(o.mac), peer_mac = ParseMac(o.peer_mac);
  const auto ip = ParseIpv4(o.ip), peer_ip = ParseIpv4(o.peer_ip);
  if (!mac || !peer_mac || !ip || !peer_ip) {
    *error = "--mac/--peer-mac want aa:bb:cc:dd:ee:ff and --ip/--peer-ip a dotted IPv4";
    return nullptr;
  }
  const bool sender = o.role == "send";
  PortConfig c;
  c.device = o.device;
  c.extra_eal_args = o.eal_args;
  c.file_prefix =
      o.file_prefix.empty() ? "raw-" + o.role + "-" + std::to_string(getpid()) : o.file_prefix;
  c.host_id = sender ? kSenderHost : kReceiverHost;
  c.mac = *mac;
  c.ipv4 = *ip;
  c.udp_port = o.udp_port;
  c.mtu_bytes = o.mtu;
  c.rx_ring = o.rx_ring;
  c.pace_bits_per_sec = static_cast<uint64_t>(o.pace_gbps * 1e9);
  c.peers = {{sender ? kReceiverHost : kSenderHost, *peer_mac, *peer_ip}};
  if (o.group >= 0 && !sender) c.groups = {static_cast<uint16_t>(o.group)};
  return OpenDpdkTransport(c, error);
}

void PrintStats(const TransportStats& s, bool json) {
  if (json) {
    std::printf("\"tx_frames\": %" PRIu64 ", \"tx_dropped\": %" PRIu64 ", \"rx_frames\": %" PRIu64
                ", \"rx_dropped_malformed\": %" PRIu64 ", \"rx_dropped_not_for_us\": %" PRIu64
                ", \"rx_dropped_unknown_source\": %" PRIu64,
                s.tx_frames, s.tx_dropped, s.rx_frames, s.rx_dropped_malformed,
                s.rx_dropped_not_for_us, s.rx_dropped_unknown_source);
  } else {
    std::printf("transport: tx %" PRIu64 " (dropped %" PRIu64 "), rx %" PRIu64
                " (malformed %" PRIu64 ", not for us %" PRIu64 ", unknown source %" PRIu64 ")\n",
                s.tx_frames, s.tx_dropped, s.rx_frames, s.rx_dropped_malformed,
                s.rx_dropped_not_for_us, s.rx_dropped_unknown_source);
  }
}

int RunSender(Transport& t, const Options& o, size_t payload) {
  std::vector<uint8_t> filler(4096 + payload);
  for (size_t i = 0; i < filler.size(); ++i)
    filler[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const Destination to = o.group >= 0 ? Destination::Group(static_cast<uint16_t>(o.group))
                                      : Destination::Host(kReceiverHost);
  uint64_t seq = 0;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  Clock::time_point now = start;
  while (now < end && !stop_requested) {
    for (uint32_t i = 0; i < kBurstFrames; ++i) {
      uint8_t* p = t.Reserve(to);
      if (p == nullptr) break;
      FillPayload(p, payload, seq++, filler);
      t.Commit(payload);
    }
    t.Flush();
    now = Clock::now();
  }
  const double elapsed = Seconds(now - start);
  const TransportStats s = t.stats();
  // End markers: the receiver learns how many frames were sent.
  for (int i = 0; i < kEndMarkers; ++i) {
    uint8_t* p = t.Reserve(to);
    if (p != nullptr) {
      FillPayload(p, kMinPayloadBytes, s.tx_frames, filler);
      const uint32_t magic = kEndMagic;
      std::memcpy(p, &magic, 4);
      const uint64_t h = XXH3_64bits(p, kMinPayloadBytes - 8);
      std::memcpy(p + kMinPayloadBytes - 8, &h, 8);
      t.Commit(kMinPayloadBytes);
      t.Flush();
    }
    struct timespec ts = {0, 2'000'000};
    nanosleep(&ts, nullptr);
  }
  const double fps = static_cast<double>(s.tx_frames) / elapsed;
  const double gbps = static_cast<double>(s.tx_bytes) * 8 / elapsed / 1e9;
  if (o.json) {
    std::printf(
        "{\"role\": \"send\", \"device\": \"%s\", \"mtu\": %u, \"frame_bytes\": %zu, "
        "\"seconds\": %.3f, \"frames_per_sec\": %.0f, \"gbit_per_sec\": %.3f, ",
        o.device.c_str(), o.mtu, payload + kFrameOverheadBytes, elapsed, fps, gbps);
    PrintStats(s, true);
    std::printf("}\n");
  } else {
    std::printf("send: %" PRIu64 " frames of %zu bytes in %.3f s: %.3f Mframes/s, %.3f Gbit/s\n",
                s.tx_frames, payload + kFrameOverheadBytes, elapsed, fps / 1e6, gbps);
    PrintStats(s, false);
  }
  return 0;
}

int RunReceiver(Transport& t, const Options& o) {
  Receipt r;
  // Wait up to `seconds` for the first frame, then until the end markers
  // arrive or `seconds` + 5 s passed since the first frame.
  const Clock::time_point start = Clock::now();
  const auto limit =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds + 5));
  const auto fn = [&](std::span<const uint8_t> p, uint16_t) { r.Data(p); };
  while (!stop_requested && r.sender_total < 0) {
    const Clock::time_point now = Clock::now();
    if (!r.any && now - start > limit) break;
    if (r.any && now - r.first > limit) break;
    if (t.Poll(256, fn) == 0 && o.idle_sleep_us > 0) t.WaitForFrames(o.idle_sleep_us);
  }
  // Frames still queued behind the first end marker.
  for (int i = 0; i < 100 && t.Poll(256, fn) > 0; ++i) {
  }
  uint64_t unique = 0;
  for (uint8_t b : r.seen) unique += b;
  const uint64_t expected =
      r.sender_total >= 0 ? static_cast<uint64_t>(r.sender_total) : (r.any ? r.highest + 1 : 0);
  const uint64_t lost = expected > unique ? expected - unique : 0;
  const double elapsed = r.frames > 1 ? Seconds(r.last - r.first) : 0;
  const double fps = elapsed > 0 ? static_cast<double>(r.frames) / elapsed : 0;
  const double gbps = elapsed > 0 ? static_cast<double>(r.bytes) * 8 / elapsed / 1e9 : 0;
  const uint64_t frame_bytes = r.frames ? r.bytes / r.frames : 0;
  const TransportStats s = t.stats();
  if (o.json) {
    std::printf("{\"role\": \"recv\", \"device\": \"%s\", \"mtu\": %u, \"frame_bytes\": %" PRIu64
                ", \"seconds\": %.3f, \"frames\": %" PRIu64
                ", \"frames_per_sec\": %.0f, "
                "\"gbit_per_sec\": %.3f, \"sender_frames\": %" PRId64 ", \"lost\": %" PRIu64
                ", \"duplicated\": %" PRIu64 ", \"out_of_order\": %" PRIu64
                ", \"bad_checksum\": %" PRIu64 ", ",
                o.device.c_str(), o.mtu, frame_bytes, elapsed, r.frames, fps, gbps, r.sender_total,
                lost, r.duplicated, r.out_of_order, r.bad_checksum);
    PrintStats(s, true);
    std::printf("}\n");
  } else {
    std::printf("recv: %" PRIu64 " frames of %" PRIu64
                " bytes in %.3f s: %.3f Mframes/s, "
                "%.3f Gbit/s\n",
                r.frames, frame_bytes, elapsed, fps / 1e6, gbps);
    std::printf("      sender sent %" PRId64 "; lost %" PRIu64 " (%.2f%%), duplicated %" PRIu64
                ", out of order %" PRIu64 ", bad checksum %" PRIu64 "\n",
                r.sender_total, lost, expected ? 100.0 * lost / expected : 0.0, r.duplicated,
                r.out_of_order, r.bad_checksum);
    PrintStats(s, false);
  }
  if (!r.any) {
    std::fprintf(stderr, "raw_throughput: no frames received\n");
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "raw_throughput: DPDK frames/s and Gbit/s between two ports through net::Transport, "
      "with loss, duplicate, order and XXH3 checks on every frame"};
  app.add_option("--role", o.role, "send or recv")
      ->required()
      ->check(CLI::IsMember({"send", "recv"}));
  app.add_option("--device", o.device, "DPDK device, e.g. net_af_packet0,iface=veth-h1")
      ->required();
  app.add_option("--mac", o.mac, "this port's MAC")->required();
  app.add_option("--ip", o.ip, "this port's IPv4")->required();
  app.add_option("--peer-mac", o.peer_mac, "the other port's MAC")->required();
  app.add_option("--peer-ip", o.peer_ip, "the other port's IPv4")->required();
  app.add_option("--mtu", o.mtu, "IP MTU")->check(CLI::Range(576u, 65344u));
  app.add_option("--seconds", o.seconds, "how long the sender sends")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--frame-bytes", o.frame_bytes,
                 "Ethernet frame size without FCS (default: mtu + 14)");
  app.add_flag("--json", o.json, "one JSON object on stdout");
  app.add_option("--file-prefix", o.file_prefix, "EAL --file-prefix (default raw-<role>-<pid>)");
  app.add_option("--eal-arg", o.eal_args, "extra EAL argument (repeatable)");
  app.add_option("--udp-port", o.udp_port, "UDP port");
  app.add_option("--pace-gbps", o.pace_gbps, "sender: pace to this rate (0: unpaced)");
  app.add_option("--group", o.group, "send to / join this multicast group instead of unicast")
      ->check(CLI::Range(0, 65535));
  app.add_option("--rx-ring", o.rx_ring, "RX ring frames");
  app.add_option("--idle-sleep-us", o.idle_sleep_us,
                 "receiver: wait this long when a poll finds nothing (0: busy-poll)");
  CLI11_PARSE(app, argc, argv);

  const uint32_t largest = o.mtu + 14;
  if (o.frame_bytes == 0) o.frame_bytes = largest;
  if (o.frame_bytes > largest || o.frame_bytes < kFrameOverheadBytes + kMinPayloadBytes) {
    std::fprintf(stderr, "raw_throughput: --frame-bytes must be %zu..%u for mtu %u\n",
                 kFrameOverheadBytes + kMinPayloadBytes, largest, o.mtu);
    return 2;
  }
  std::signal(SIGINT, [](int) { stop_requested = 1; });
  std::signal(SIGTERM, [](int) { stop_requested = 1; });

  std::string error;
  std::unique_ptr<Transport> t = Open(o, &error);
  if (!t) {
    std::fprintf(stderr, "raw_throughput: %s\n", error.c_str());
    return 1;
  }
  const size_t payload = o.frame_bytes - kFrameOverheadBytes;
  return o.role == "send" ? RunSender(*t, o, payload) : RunReceiver(*t, o);
}

}  // namespace
}  // namespace dsm::net

int main(int argc, char** argv) { return dsm::net::Main(argc, argv); }
