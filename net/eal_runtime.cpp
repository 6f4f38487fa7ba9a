#include "net/eal_runtime.h"

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "net/tuning.h"

namespace dsm::net {
namespace {

bool Has(const std::vector<std::string>& extra, const std::string& opt) {
  return std::any_of(extra.begin(), extra.end(),
                     [&](const std::string& a) { return a == opt || a.rfind(opt + "=", 0) == 0; });
}

// The extra arguments pick hugepages (or say how memory is backed) themselves.
bool ChoosesMemoryMode(const std::vector<std::string>& extra) {
  for (const char* opt :
       {"--socket-mem", "--socket-limit", "--huge-dir", "--huge-unlink", "--no-huge", "--in-memory",
        "--no-shconf", "--legacy-mem", "--single-file-segments"}) {
    if (Has(extra, opt)) return true;
  }
  return false;
}

// "0-3,6" from {0,1,2,3,6}.
std::string CpuList(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) out += (out.empty() ? "" : " ") + a;
  return out;
}

std::mutex eal_mutex;
bool eal_tried = false;
bool eal_ok = false;
std::string eal_error;

}  // namespace

std::vector<int> CurrentThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

std::vector<std::string> BuildEalArgs(const EalOptions& o) {
  std::vector<std::string> args = {"dsm-net"};
  const std::string prefix =
      o.file_prefix.empty() ? "dsm-" + std::to_string(getpid()) : o.file_prefix;
  args.push_back("--file-prefix=" + prefix);
  if (o.pci_device.empty()) {
    args.push_back("--no-pci");
  } else {
    args.push_back("-a");
    args.push_back(o.pci_device);
  }
  if (!ChoosesMemoryMode(o.extra_args)) {
    // --in-memory would be the one-word form, but DPDK refuses it with
    // --no-huge (which implies legacy memory); --no-shconf is its other half.
    args.push_back("--no-huge");
    args.push_back("--no-shconf");
  }
  if (!Has(o.extra_args, "-m") && !Has(o.extra_args, "--socket-mem")) {
    args.push_back("-m");
    args.push_back(std::to_string(std::max(o.memory_mb, kEalBaseMemoryMb)));
  }
  args.push_back("--no-telemetry");
  if (!Has(o.extra_args, "-l") && !Has(o.extra_args, "--lcores") && !Has(o.extra_args, "-c")) {
    args.push_back("--lcores=0@(" + CpuList(o.cpus.empty() ? std::vector<int>{0} : o.cpus) + ")");
  }
  if (!Has(o.extra_args, "--log-level")) args.push_back("--log-level=lib.eal:warning");
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  return args;
}

uint32_t EalMemoryMbFor(uint32_t mbufs, uint32_t data_room_bytes) {
  const uint64_t pool = uint64_t{mbufs} * (data_room_bytes + kMbufOverheadBytes);
  return static_cast<uint32_t>((pool + (1u << 20) - 1) >> 20) + kEalBaseMemoryMb;
}

bool EnsureEalStarted(const EalOptions& options, std::string* error) {
  std::lock_guard<std::mutex> lock(eal_mutex);
  if (eal_tried) {
    if (!eal_ok) *error = eal_error;
    return eal_ok;
  }
  eal_tried = true;
  // DPDK logs to stdout by default; keep stdout for the program's own output.
  rte_openlog_stream(stderr);
  std::vector<std::string> args = BuildEalArgs(options);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // rte_eal_init pins the calling thread to the lcore's CPUs and may reorder argv.
  const std::vector<std::string> shown = args;
  const int rc = rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  if (rc < 0) {
    const int err = rte_errno;
    eal_error = "DPDK EAL start-up failed (" + std::string(rte_strerror(err)) +
                "); see the EAL lines above. Arguments: " + Join(shown) + ". ";
    if (err == EACCES || err == EPERM) {
      eal_error += "Run as root (or with CAP_NET_RAW, CAP_IPC_LOCK and CAP_SYS_ADMIN).";
    } else if (err == EALREADY) {
      eal_error += "Something else in this process started DPDK already.";
    } else {
      eal_error += "Check the extra EAL arguments and that --file-prefix is unique per process.";
    }
    *error = eal_error;
    return false;
  }
  // Without shared config DPDK leaves its runtime directory empty; remove it
  // so that runs leave nothing behind (rmdir keeps a directory with content).
  if (std::find(shown.begin(), shown.end(), "--no-shconf") != shown.end()) {
    rmdir(rte_eal_get_runtime_dir());
  }
  eal_ok = true;
  return true;
}

int ProbeDevice(const std::string& name, const std::string& devargs, std::string* error) {
  uint16_t port = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0) return port;
  const int rc = rte_dev_probe(devargs.c_str());
  if (rc < 0) {
    *error = "DPDK could not probe device \"" + devargs + "\": " + rte_strerror(-rc) +
             " (see the DPDK lines above; does the interface or socket exist, in this "
             "network namespace, and is the name's driver installed?)";
    return -1;
  }
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
    *error = "device \"" + devargs + "\" probed but no ethdev port is named \"" + name + "\"";
    return -1;
  }
  return port;
}

}  // namespace dsm::net
