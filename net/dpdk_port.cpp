#include "net/dpdk_port.h"

#include <dirent.h>
#include <net/if.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_epoll.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "net/eal_runtime.h"
#include "net/host_table.h"
#include "net/shared_memory_warmup.h"
#include "net/tuning.h"

namespace dsm::net {

static_assert(kMbufHeadroomBytes == RTE_PKTMBUF_HEADROOM,
              "device_args.h sizes mbufs with a different headroom than DPDK's");

namespace {

std::mutex ports_mutex;
std::set<uint16_t> ports_in_use;

// This process's AF_PACKET sockets. 22.11's net_af_packet opens its queue's
// socket when the device is probed and does not say which descriptor it is.
std::set<int> PacketSockets() {
  std::set<int> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    int domain = 0;
    socklen_t len = sizeof(domain);
    if (fd != dirfd(dir) && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
        domain == AF_PACKET) {
      out.insert(fd);
    }
  }
  closedir(dir);
  return out;
}

std::string PortError(const char* what, uint16_t port, int rc) {
  return std::string(what) + " failed on port " + std::to_string(port) + ": " +
         rte_strerror(rc < 0 ? -rc : rc) + " (see the DPDK lines above)";
}

bool IsZero(const MacAddr& mac) {
  return std::all_of(mac.begin(), mac.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace

bool CheckKernelInterface(const std::string& iface, uint32_t mtu_bytes, std::string* error) {
  if (iface.size() >= IFNAMSIZ) {
    *error = "interface name \"" + iface + "\" is longer than " + std::to_string(IFNAMSIZ - 1);
    return false;
  }
  // A socket belongs to the creating thread's network namespace, as the PMD's will.
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket() for interface checks failed: ") + std::strerror(errno);
    return false;
  }
  ifreq req{};
  std::memcpy(req.ifr_name, iface.c_str(), iface.size() + 1);
  const int rc = ioctl(fd, SIOCGIFMTU, &req);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    *error = "kernel interface \"" + iface + "\": " + std::strerror(err) +
             (err == ENODEV ? " (it does not exist in this network namespace: ip link show)" : "");
    return false;
  }
  if (static_cast<uint32_t>(req.ifr_mtu) < mtu_bytes) {
    *error = "kernel interface \"" + iface + "\" has MTU " + std::to_string(req.ifr_mtu) +
             " but the transport uses mtu " + std::to_string(mtu_bytes) +
             "; the kernel would drop larger frames silently. Raise it on both veth ends "
             "and any bridge: ip link set dev " +
             iface + " mtu " + std::to_string(mtu_bytes);
    return false;
  }
  return true;
}

// af_packet sends into a down interface without any error counter, and its
// PMD cannot raise the link (-ENOTSUP in 22.11): raise it here (needs
// CAP_NET_ADMIN), else say how.
bool DpdkPort::BringUp(const std::string& iface, std::string* error) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq req{};
  std::memcpy(req.ifr_name, iface.c_str(), std::min(iface.size() + 1, sizeof(req.ifr_name)));
  bool up = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &req) == 0;
  int err = errno;
  if (up && (req.ifr_flags & IFF_UP) == 0) {
    req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP);
    up = ioctl(fd, SIOCSIFFLAGS, &req) == 0;
    err = errno;
  }
  if (fd >= 0) close(fd);
  if (!up) {
    *error = "kernel interface \"" + iface + "\" is down and could not be brought up (" +
             std::strerror(err) + "): ip link set dev " + iface + " up";
  }
  return up;
}

bool SeparateTapKernelMac(const std::string& iface, const MacAddr& port_mac, std::string* error) {
  if (iface.empty() || iface.size() >= IFNAMSIZ) return true;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  ifreq req{};
  std::memcpy(req.ifr_name, iface.c_str(), iface.size() + 1);
  bool ok = true;
  if (ioctl(fd, SIOCGIFHWADDR, &req) == 0 &&
      std::memcmp(req.ifr_hwaddr.sa_data, port_mac.data(), 6) == 0) {
    // Locally administered and different from the port's in its last byte.
    req.ifr_hwaddr.sa_data[0] = static_cast<char>((port_mac[0] | 0x02) & ~0x01);
    req.ifr_hwaddr.sa_data[5] = static_cast<char>(port_mac[5] ^ 0x80);
    if (ioctl(fd, SIOCSIFHWADDR, &req) != 0) {
      *error = "cannot give the kernel side of " + iface + " a MAC of its own (" +
               std::strerror(errno) +
               "); with the port's MAC on both sides a bridge "
               "keeps unicast frames for itself";
      ok = false;
    }
  }
  close(fd);
  return ok;
}

bool RemoveStaleMemifSocket(const std::string& path, std::string* error) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return true;
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return true;  // DPDK will say
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  const int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  close(fd);
  if (rc == 0) {
    *error = "memif socket " + path + " is served by another process already";
    return false;
  }
  if (err == ECONNREFUSED) unlink(path.c_str());  // left by a process that died
  return true;
}

std::unique_ptr<DpdkPort> DpdkPort::Open(const DeviceSpec& spec, const PortConfig& config,
                                         std::string* error) {
  if (spec.kind == DeviceKind::kAfPacket &&
      !CheckKernelInterface(spec.iface, config.mtu_bytes, error)) {
    return nullptr;
  }
  if (spec.kind == DeviceKind::kMemif && spec.memif_server && !spec.memif_socket_file.empty() &&
      !RemoveStaleMemifSocket(spec.memif_socket_file, error)) {
    return nullptr;
  }
  const std::set<int> sockets_before =
      spec.kind == DeviceKind::kAfPacket ? PacketSockets() : std::set<int>{};
  const int id = ProbeDevice(spec.name, spec.devargs, error);
  if (id < 0) return nullptr;
  int wake_fd = -1;
  if (spec.kind == DeviceKind::kAfPacket) {
    // qpairs=1: the one new socket is the queue's; anything else, none.
    std::vector<int> added;
    for (int fd : PacketSockets()) {
      if (!sockets_before.count(fd)) added.push_back(fd);
    }
    if (added.size() == 1) wake_fd = added.front();
  }
  {
    std::lock_guard<std::mutex> lock(ports_mutex);
    if (!ports_in_use.insert(static_cast<uint16_t>(id)).second) {
      *error = "device " + spec.name + " is already open in this process";
      return nullptr;
    }
  }
  std::unique_ptr<DpdkPort> port(new DpdkPort);
  port->port_ = static_cast<uint16_t>(id);
  port->opened_ = true;
  port->kind_ = spec.kind;
  port->rx_wake_fd_ = wake_fd;
  if (!port->Configure(spec, config, error)) return nullptr;
  return port;
}

bool DpdkPort::Configure(const DeviceSpec& spec, const PortConfig& config, std::string* error) {
  rte_eth_dev_info info{};
  int rc = rte_eth_dev_info_get(port_, &info);
  if (rc != 0) {
    *error = PortError("rte_eth_dev_info_get", port_, rc);
    return false;
  }
  rte_eth_conf conf{};
  uint32_t allowed_mtu = info.max_mtu;
  if (info.max_rx_pktlen > RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN) {
    allowed_mtu = std::min(allowed_mtu, info.max_rx_pktlen - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN);
  }
  if (config.mtu_bytes <= allowed_mtu) {
    conf.rxmode.mtu = config.mtu_bytes;
  } else if (spec.mtu_from_devargs) {
    // The frame size of a virtual device is its devargs' and kernel's business.
    conf.rxmode.mtu = std::min<uint32_t>(allowed_mtu, RTE_ETHER_MTU);
  } else {
    *error = spec.name + " supports mtu up to " + std::to_string(allowed_mtu) + ", not " +
             std::to_string(config.mtu_bytes);
    return false;
  }
  // Frames in two pieces (headers, then a tail attached from the sender's
  // memory): only devices that copy a frame out while it is sent, so the tail
  // is read once, at once, and by the CPU. net_ring hands the mbufs on whole
  // (the receiver would get the chain) and a NIC would DMA from memory DPDK
  // has not mapped for it.
  const bool copies_on_send = spec.kind == DeviceKind::kAfPacket || spec.kind == DeviceKind::kMemif ||
                              spec.kind == DeviceKind::kTap || spec.kind == DeviceKind::kPcap;
  const bool tails = copies_on_send && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
  if (tails) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  // RX interrupts where the device may have them (22.11's af_packet, memif,
  // ring, pcap and null have none); a device that refuses the request at
  // configure time is configured again without.
  conf.intr_conf.rxq = spec.kind == DeviceKind::kTap || spec.kind == DeviceKind::kPci ||
                       spec.kind == DeviceKind::kAfXdp || spec.kind == DeviceKind::kOtherVdev;
  rc = rte_eth_dev_configure(port_, 1, 1, &conf);
  if (rc != 0 && conf.intr_conf.rxq) {
    conf.intr_conf.rxq = 0;
    rc = rte_eth_dev_configure(port_, 1, 1, &conf);
  }
  if (rc != 0) {
    *error = PortError("rte_eth_dev_configure", port_, rc);
    return false;
  }
  uint16_t rx_desc = static_cast<uint16_t>(std::min<uint32_t>(config.rx_ring, UINT16_MAX));
  uint16_t tx_desc = static_cast<uint16_t>(std::min<uint32_t>(config.tx_ring, UINT16_MAX));
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_, &rx_desc, &tx_desc);
  if (rc != 0) {
    *error = PortError("rte_eth_dev_adjust_nb_rx_tx_desc", port_, rc);
    return false;
  }
  int socket = rte_eth_dev_socket_id(port_);
  if (socket < 0) socket = SOCKET_ID_ANY;

  const std::string pool_name = "dsm_pool_" + std::to_string(port_);
  const uint32_t cache = std::min<uint32_t>(kMempoolCacheObjects, config.mbufs * 2 / 3);
  pool_ = rte_pktmbuf_pool_create(pool_name.c_str(), config.mbufs, cache, 0,
                                  static_cast<uint16_t>(spec.rx_data_room_bytes), socket);
  if (pool_ == nullptr) {
    *error = "cannot create a pool of " + std::to_string(config.mbufs) + " mbufs of " +
             std::to_string(spec.rx_data_room_bytes) + " bytes: " + rte_strerror(rte_errno) +
             " (EAL memory too small? pass a bigger -m in extra_eal_args, or lower mbufs)";
    return false;
  }
  frame_room_bytes_ = spec.rx_data_room_bytes - RTE_PKTMBUF_HEADROOM;
  if (tails) {
    // One per frame waiting for the device at most: the backlog and the ring.
    const uint32_t n = static_cast<uint32_t>(kMaxTxBacklogFrames) + tx_desc + kTxBurstFrames;
    tail_pool_ = rte_pktmbuf_pool_create(("dsm_tail_" + std::to_string(port_)).c_str(), n,
                                         std::min<uint32_t>(kMempoolCacheObjects, n * 2 / 3), 0, 0,
                                         socket);
    // Without it frames carry copies of their tails, as before: not an error.
  }

  rc = rte_eth_rx_queue_setup(port_, 0, rx_desc, static_cast<unsigned>(socket), nullptr, pool_);
  if (rc != 0) {
    *error = PortError("rte_eth_rx_queue_setup", port_, rc);
    return false;
  }
  rc = rte_eth_tx_queue_setup(port_, 0, tx_desc, static_cast<unsigned>(socket), nullptr);
  if (rc != 0) {
    *error = PortError("rte_eth_tx_queue_setup", port_, rc);
    return false;
  }
  if (!SetUpAddresses(spec, config, error)) return false;
  rc = rte_eth_dev_start(port_);
  if (rc != 0) {
    *error = PortError("rte_eth_dev_start", port_, rc);
    return false;
  }
  started_ = true;
  memif_ = spec.kind == DeviceKind::kMemif;
  memif_client_ = memif_ && !spec.memif_server;
  next_link_check_tsc_ = rte_get_tsc_cycles() + rte_get_tsc_hz();
  if (spec.kind == DeviceKind::kAfPacket && !BringUp(spec.iface, error)) return false;
  if (spec.kind == DeviceKind::kTap) {
    char name[IF_NAMESIZE] = {};
    const std::string iface = !spec.iface.empty()                              ? spec.iface
                              : if_indextoname(info.if_index, name) != nullptr ? name
                                                                               : "";
    if (!SeparateTapKernelMac(iface, mac_, error)) return false;
  }
  if (conf.intr_conf.rxq) SetUpRxInterrupts();
  return true;
}

bool DpdkPort::SetUpAddresses(const DeviceSpec& spec, const PortConfig& config,
                              std::string* error) {
  rte_ether_addr device_mac{};
  int rc = rte_eth_macaddr_get(port_, &device_mac);
  if (rc != 0) {
    *error = PortError("rte_eth_macaddr_get", port_, rc);
    return false;
  }
  bool filter_in_software = false;
  if (IsZero(config.mac)) {
    std::memcpy(mac_.data(), device_mac.addr_bytes, 6);
  } else {
    mac_ = config.mac;
    rte_ether_addr wanted{};
    std::memcpy(wanted.addr_bytes, config.mac.data(), 6);
    if (!rte_is_same_ether_addr(&wanted, &device_mac)) {
      rc = rte_eth_dev_default_mac_addr_set(port_, &wanted);
      // A device that cannot take the configured MAC still sends it as the
      // source address; it must then hand us frames for any MAC.
      if (rc != 0) filter_in_software = true;
    }
  }
  if (filter_in_software) {
    rc = rte_eth_promiscuous_enable(port_);
    if (rc != 0 && rc != -ENOTSUP) {
      *error = spec.name + " cannot use MAC " + FormatMac(config.mac) +
               " (setting it and promiscuous mode both failed: " + rte_strerror(-rc) +
               "); leave mac unset to use the device's own";
      return false;
    }
  }
  if (!config.groups.empty()) {
    std::vector<rte_ether_addr> groups(config.groups.size());
    for (size_t i = 0; i < groups.size(); ++i) {
      const MacAddr m = GroupMac(config.groups[i]);
      std::memcpy(groups[i].addr_bytes, m.data(), 6);
    }
    // Virtual devices deliver every multicast frame and answer -ENOTSUP.
    rc = rte_eth_dev_set_mc_addr_list(port_, groups.data(), static_cast<uint32_t>(groups.size()));
    if (rc != 0) {
      rc = rte_eth_allmulticast_enable(port_);
      if (rc != 0 && rc != -ENOTSUP) {
        *error = PortError("rte_eth_allmulticast_enable", port_, rc);
        return false;
      }
    }
  }
  return true;
}

void DpdkPort::SetUpRxInterrupts() {
  const int fd = epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return;
  if (rte_eth_dev_rx_intr_ctl_q(port_, 0, fd, RTE_INTR_EVENT_ADD, nullptr) != 0) {
    close(fd);
    return;
  }
  epoll_fd_ = fd;
  if (!ArmRxInterrupt()) {
    rte_eth_dev_rx_intr_ctl_q(port_, 0, fd, RTE_INTR_EVENT_DEL, nullptr);
    close(fd);
    epoll_fd_ = -1;
    return;
  }
  DisarmRxInterrupt();
}

bool DpdkPort::ArmRxInterrupt() {
  if (epoll_fd_ < 0) return false;
  // net_tap's queue fd is always armed and has no enable operation.
  const int rc = rte_eth_dev_rx_intr_enable(port_, 0);
  return rc == 0 || rc == -ENOTSUP;
}

void DpdkPort::WaitRxInterrupt(int timeout_ms) {
  rte_epoll_event event{};
  rte_epoll_wait(epoll_fd_, &event, 1, timeout_ms);
}

void DpdkPort::DisarmRxInterrupt() { rte_eth_dev_rx_intr_disable(port_, 0); }

uint16_t DpdkPort::RxBurst(rte_mbuf** frames, uint16_t n) {
  return rte_eth_rx_burst(port_, 0, frames, n);
}

uint16_t DpdkPort::TxBurst(rte_mbuf** frames, uint16_t n) {
  return rte_eth_tx_burst(port_, 0, frames, n);
}

void DpdkPort::KeepConnected() {
  if (!memif_) return;
  const uint64_t now = rte_get_tsc_cycles();
  if (now < next_link_check_tsc_) return;
  next_link_check_tsc_ = now + rte_get_tsc_hz();
  rte_eth_link link{};
  const bool down = rte_eth_link_get_nowait(port_, &link) == 0 && link.link_status != RTE_ETH_LINK_UP;
  if (down) {
    regions_warm_ = false;  // a reconnection maps new regions
  } else if (!regions_warm_) {
    // The set is the process's: another link's regions, populated already,
    // are not done twice.
    static std::set<uintptr_t> populated;
    PopulateMappingsNamed("memif_region", &populated);
    regions_warm_ = true;
  }
  if (!memif_client_) return;
  // Down at two checks a second apart: not a connection still in its handshake
  // (restarting a port mid-handshake crashes 22.11's interrupt thread).
  const bool restart = down && link_was_down_;
  link_was_down_ = down && !restart;
  if (!restart) return;
  if (started_) rte_eth_dev_stop(port_);
  started_ = rte_eth_dev_start(port_) == 0;  // fails while the server is not back: retried
}

void DpdkPort::Stop() {
  if (!started_) return;
  rte_eth_dev_stop(port_);
  started_ = false;
}

DpdkPort::~DpdkPort() {
  if (epoll_fd_ >= 0) {
    rte_eth_dev_rx_intr_ctl_q(port_, 0, epoll_fd_, RTE_INTR_EVENT_DEL, nullptr);
    close(epoll_fd_);
  }
  if (opened_) {
    rte_eth_dev_info info{};
    rte_device* device = rte_eth_dev_info_get(port_, &info) == 0 ? info.device : nullptr;
    if (started_) rte_eth_dev_stop(port_);
    // 22.11's memif tears its control channel down later, in the EAL's
    // interrupt thread; closing the port before that has run crashes that
    // thread (seen with both ends in one process). Let it run first.
    if (kind_ == DeviceKind::kMemif) usleep(kMemifCloseSettleUs);
    rte_eth_dev_close(port_);
    // Detach so that the same device can be probed (opened) again.
    if (device != nullptr) rte_dev_remove(device);
    std::lock_guard<std::mutex> lock(ports_mutex);
    ports_in_use.erase(port_);
  }
  if (pool_ != nullptr) rte_mempool_free(pool_);
  if (tail_pool_ != nullptr) rte_mempool_free(tail_pool_);
}

}  // namespace dsm::net
