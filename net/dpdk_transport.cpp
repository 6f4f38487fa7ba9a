#include "net/dpdk_transport.h"

#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <utility>

#include "net/device_args.h"
#include "net/eal_runtime.h"
#include "net/tuning.h"
#include "net/udp_framing.h"

namespace dsm::net {

std::unique_ptr<Transport> OpenDpdkTransport(const PortConfig& config, std::string* error) {
  return DpdkTransport::Open(config, error);
}

std::unique_ptr<DpdkTransport> DpdkTransport::Open(const PortConfig& given, std::string* error) {
  std::string why;
  PortConfig config = given;
  const PortCounts counts =
      CountsForMtu({config.rx_ring, config.tx_ring, config.mbufs}, config.mtu_bytes,
                   {kMinRxRingFrames, kMinTxRingFrames,
                    kMinRxRingFrames + kMinTxRingFrames + 2 * kRxBurstFrames + kMaxQueuedTxFrames});
  config.rx_ring = counts.rx_ring;
  config.tx_ring = counts.tx_ring;
  config.mbufs = counts.mbufs;
  auto fail = [&](const std::string& message) {
    *error = "opening DPDK port \"" + config.device + "\": " + message;
    return nullptr;
  };
  if (config.udp_port == 0) return fail("udp_port must not be 0");
  if (config.rx_ring == 0 || config.tx_ring == 0) return fail("rx_ring and tx_ring must be > 0");
  if (config.mbufs < config.rx_ring + config.tx_ring + 2 * kRxBurstFrames + kMaxQueuedTxFrames) {
    return fail("mbufs (" + std::to_string(config.mbufs) + ") must exceed rx_ring + tx_ring + " +
                std::to_string(2 * kRxBurstFrames + kMaxQueuedTxFrames) +
                " or receiving starves; raise mbufs or lower the rings");
  }
  const std::optional<DeviceSpec> spec = BuildDeviceSpec(
      config.device, config.mtu_bytes, std::max(config.rx_ring, config.tx_ring), &why);
  if (!spec) return fail(why);
  // The own MAC may come from the device; check the rest before touching DPDK.
  MacAddr probe_mac = config.mac;
  if (probe_mac == MacAddr{}) probe_mac = {0x02, 0, 0, 0, 0, 1};
  if (!HostTable::Build(probe_mac, config.ipv4, config.peers, config.groups, &why)) {
    return fail(why);
  }

  EalOptions eal;
  eal.file_prefix = config.file_prefix;
  if (spec->kind == DeviceKind::kPci) eal.pci_device = config.device;
  // Per port: its pool, and the base share that also holds the device's own
  // memory (memif's shared rings and buffers).
  eal.memory_mb = EalMemoryMbFor(config.mbufs, spec->rx_data_room_bytes) *
                  std::max(config.ports_in_process, 1u);
  eal.extra_args = config.extra_eal_args;
  eal.cpus = CurrentThreadCpus();
  if (!EnsureEalStarted(eal, &why)) return fail(why);

  std::unique_ptr<DpdkPort> port = DpdkPort::Open(*spec, config, &why);
  if (!port) return fail(why);
  std::optional<HostTable> hosts =
      HostTable::Build(port->mac(), config.ipv4, config.peers, config.groups, &why);
  if (!hosts) return fail(why);
  return std::unique_ptr<DpdkTransport>(
      new DpdkTransport(config, std::move(port), std::move(*hosts)));
}

DpdkTransport::DpdkTransport(const PortConfig& config, std::unique_ptr<DpdkPort> port,
                             HostTable hosts)
    : udp_port_(config.udp_port),
      max_payload_bytes_(config.mtu_bytes - kIpv4HeaderBytes - kUdpHeaderBytes),
      tx_stall_tsc_(uint64_t{config.tx_stall_us} * rte_get_tsc_hz() / 1'000'000),
      port_(std::move(port)),
      hosts_(std::move(hosts)),
      pacer_(config.pace_bits_per_sec, rte_get_tsc_hz(), kPacerBurstBits,
             [] { return rte_get_tsc_cycles(); }) {
  tx_queue_.reserve(kMaxTxBacklogFrames);
  tx_progress_tsc_ = rte_get_tsc_cycles();
}

DpdkTransport::~DpdkTransport() {
  if (reserved_ != nullptr) rte_pktmbuf_free(reserved_);
  for (rte_mbuf* m : tx_queue_) rte_pktmbuf_free(m);
  for (uint16_t i = rx_stash_begin_; i < rx_stash_end_; ++i) rte_pktmbuf_free(rx_stash_[i]);
}

}  // namespace dsm::net
