// One DPDK ethdev port with one RX and one TX queue, its mbuf pool, its MAC
// and, where the device has them, RX interrupts. Owns the device: closing
// detaches it so that the same name can be opened again in the process.
#ifndef DSM_NET_DPDK_PORT_H_
#define DSM_NET_DPDK_PORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "net/device_args.h"
#include "net/transport.h"

struct rte_mbuf;
struct rte_mempool;

namespace dsm::net {

class DpdkPort {
 public:
  // The EAL must be running. `config` gives rings, pool size, MAC, MTU, groups.
  static std::unique_ptr<DpdkPort> Open(const DeviceSpec& spec, const PortConfig& config,
                                        std::string* error);
  ~DpdkPort();
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;

  uint16_t id() const { return port_; }
  rte_mempool* pool() const { return pool_; }
  // Buffer-less mbufs for frame tails attached from the caller's memory
  // (rte_pktmbuf_attach_extbuf); nullptr where the port does not take
  // two-segment frames (see Configure).
  rte_mempool* tail_pool() const { return tail_pool_; }
  const MacAddr& mac() const { return mac_; }
  // Room for one frame in a pool mbuf (data room minus headroom).
  uint32_t frame_room_bytes() const { return frame_room_bytes_; }

  uint16_t RxBurst(rte_mbuf** frames, uint16_t n);
  uint16_t TxBurst(rte_mbuf** frames, uint16_t n);

  // memif, at most once a second: a client whose server went away (its
  // daemon restarted) does not reconnect by itself, so a client port whose
  // link is down is restarted, which connects it again once the server is
  // back. A link found up populates the regions it mapped
  // (shared_memory_warmup.h).
  void KeepConnected();
  // Stops the device (no frames in or out); the destructor closes it.
  void Stop();

  // RX interrupts: arm, wait (whole milliseconds), disarm. Without them
  // (rx_interrupts() false) Arm returns false and the caller sleeps instead.
  bool rx_interrupts() const { return epoll_fd_ >= 0; }
  // af_packet: the PMD's AF_PACKET socket, which polls readable while its RX
  // ring holds frames (Transport::rx_wake_fd); -1 for other devices.
  int rx_wake_fd() const { return rx_wake_fd_; }
  bool ArmRxInterrupt();
  void WaitRxInterrupt(int timeout_ms);
  void DisarmRxInterrupt();

 private:
  DpdkPort() = default;
  bool Configure(const DeviceSpec& spec, const PortConfig& config, std::string* error);
  bool SetUpAddresses(const DeviceSpec& spec, const PortConfig& config, std::string* error);
  void SetUpRxInterrupts();
  bool BringUp(const std::string& iface, std::string* error);

  uint16_t port_ = 0;
  bool opened_ = false;
  bool started_ = false;
  DeviceKind kind_ = DeviceKind::kOtherVdev;
  rte_mempool* pool_ = nullptr;
  rte_mempool* tail_pool_ = nullptr;
  MacAddr mac_{};
  uint32_t frame_room_bytes_ = 0;
  int epoll_fd_ = -1;
  int rx_wake_fd_ = -1;  // owned by the PMD
  bool memif_ = false;
  bool memif_client_ = false;
  uint64_t next_link_check_tsc_ = 0;
  bool link_was_down_ = false;
  bool regions_warm_ = false;  // populated since the link last came up
};

// af_packet and tap: the kernel interface must exist in this network namespace
// and carry frames of `mtu_bytes` (the kernel silently drops larger ones).
bool CheckKernelInterface(const std::string& iface, uint32_t mtu_bytes, std::string* error);

// A memif server's socket file left by a process that died makes the next
// server fail ("Address already in use"): removed when nobody listens on it.
// Fails when another process serves it.
bool RemoveStaleMemifSocket(const std::string& path, std::string* error);

// net_tap gives its kernel interface the port's MAC; attached to a bridge,
// that interface then owns the MAC and unicast for the port never reaches
// DPDK. Gives the kernel side a MAC of its own when the two are equal.
bool SeparateTapKernelMac(const std::string& iface, const MacAddr& port_mac, std::string* error);

}  // namespace dsm::net

#endif  // DSM_NET_DPDK_PORT_H_
