// DPDK's Environment Abstraction Layer, started at most once per process (DPDK
// cannot start it twice, not even after a failure). Devices are probed after
// start-up, one by one (ProbeDevice), so that a process may open several ports
// and a device that fails to probe gets its own error instead of failing the EAL.
#ifndef DSM_NET_EAL_RUNTIME_H_
#define DSM_NET_EAL_RUNTIME_H_

#include <cstdint>
#include <string>
#include <vector>

namespace dsm::net {

struct EalOptions {
  std::string file_prefix;              // empty: "dsm-<pid>"
  std::string pci_device;               // a PCI address to allow, or "" for --no-pci
  uint32_t memory_mb = 0;               // -m, when the extra args do not size memory
  std::vector<std::string> extra_args;  // appended last
  std::vector<int> cpus;                // the calling thread's CPUs (the lcore's set)
};

// The EAL command line for `options` (argv[0] included). Unless the extra
// arguments choose how memory is backed (--socket-mem, --huge-dir, --no-huge,
// --in-memory, --legacy-mem, ...) the EAL runs without hugepages (--no-huge)
// and without shared files (--no-shconf), so it leaves nothing behind; -m is
// `memory_mb` unless the extra arguments give it (a process that opens
// several ports sizes it for all of them). One lcore (id 0) runs on the caller's CPUs rather
// than being pinned to CPU 0: on a 2-core host a pinned sender and receiver
// would share one core.
std::vector<std::string> BuildEalArgs(const EalOptions& options);

// EAL memory for a pool of `mbufs` buffers with `data_room_bytes` each.
uint32_t EalMemoryMbFor(uint32_t mbufs, uint32_t data_room_bytes);

// Starts the EAL on the first call; later calls return the first outcome
// (their options are ignored). Thread-safe.
bool EnsureEalStarted(const EalOptions& options, std::string* error);

// Probes `devargs` ("net_af_packet0,iface=veth0,..." or a PCI address) unless
// a port named `name` exists already. Returns the port id, or -1 with `error`.
int ProbeDevice(const std::string& name, const std::string& devargs, std::string* error);

// The calling thread's CPU affinity.
std::vector<int> CurrentThreadCpus();

}  // namespace dsm::net

#endif  // DSM_NET_EAL_RUNTIME_H_
