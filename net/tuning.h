// Every number of net/ that a person might tune, with its unit in its name.
// net/README.md explains the values measured on this project's machines.
#ifndef DSM_NET_TUNING_H_
#define DSM_NET_TUNING_H_

#include <cstddef>
#include <cstdint>

namespace dsm::net {

// Frames handed to rte_eth_rx_burst / rte_eth_tx_burst at a time.
inline constexpr uint16_t kRxBurstFrames = 32;
inline constexpr uint16_t kTxBurstFrames = 32;

// A TX burst the device refuses entirely is retried this many times, each after
// kTxRetryPauseUs, before the refused frames stay queued for the next Flush.
inline constexpr uint32_t kTxMaxIdleRetries = 64;
inline constexpr uint32_t kTxRetryPauseUs = 2;

// The fewest ring slots a port gets when its frames are larger than
// kCountedFrameBytes (device_args.h: CountsForMtu keeps the rings' bytes).
inline constexpr uint32_t kMinRxRingFrames = 512;
inline constexpr uint32_t kMinTxRingFrames = 128;

// Frames queued by Commit beyond this are flushed without waiting for Flush.
inline constexpr size_t kMaxQueuedTxFrames = 512;
// Frames a full device ring leaves queued are kept, up to this many; beyond
// it Commit drops (tx_dropped). Before, the refused frames of a burst were
// dropped after kTxMaxIdleRetries, and the receivers asked for them again:
// 6,600-20,000 resent frames per 8 s run on memif at f = 100%.
inline constexpr size_t kMaxTxBacklogFrames = 4 * kMaxQueuedTxFrames;

// A frame's tail shorter than this is copied into the frame even when the
// caller offers it by reference (Transport::CommitWithTail): attaching it
// costs an mbuf and a second segment, which a copy this short does not.
inline constexpr size_t kMinTailBytes = 1024;

// The pacer lets this many bits go back to back before it spaces frames
// (token bucket depth), and counts this many bytes of Ethernet overhead per
// frame (preamble 8 + inter-frame gap 12 + FCS 4) so that a rate means line rate.
inline constexpr uint64_t kPacerBurstBits = 64 * 1024 * 8;
inline constexpr uint32_t kWireOverheadBytesPerFrame = 24;
// A pacing wait longer than this sleeps; a shorter one spins.
inline constexpr uint64_t kPacerSleepAboveNs = 50'000;

// WaitForFrames uses RX interrupts only for waits of at least this long:
// rte_epoll_wait counts whole milliseconds, and a shorter wait gains nothing
// from an interrupt over a sleep.
inline constexpr uint32_t kMinInterruptWaitUs = 1000;

// Mempool per-lcore cache (objects); capped by DPDK at n / 1.5 and 512.
inline constexpr uint32_t kMempoolCacheObjects = 256;
// Bytes DPDK adds around each mbuf's data room: struct rte_mbuf (128) plus the
// mempool object header and trailer, rounded up.
inline constexpr uint32_t kMbufOverheadBytes = 256;
// EAL memory beyond the mbuf pool (rings, ethdev, mempool headers, malloc heap).
inline constexpr uint32_t kEalBaseMemoryMb = 64;

// Ethernet frames shorter than this (without FCS) are padded with zeros.
inline constexpr size_t kMinFrameBytes = 60;
inline constexpr uint8_t kIpv4Ttl = 64;

// af_packet: a block (kernel ring unit) is the least common multiple of the page
// size and the frame slot size; the slot size is raised in steps of 16 until
// the block is at most this big, so that rings do not need huge contiguous blocks.
inline constexpr uint32_t kMaxAfPacketBlockBytes = 1u << 20;
// af_packet: a ring (the kernel's; RX and TX each have one) holds at least
// this many bytes of slots unless framecnt is given. The kernel drops what
// arrives while the ring is full, and a receiver sharing 2 cores is away for
// tens of ms: 4096 slots of 1500-byte frames (6 MiB) lost 1.5% of the frames
// of a 64 MiB version; 21,248 (32 MiB) lost none. The cost is kernel memory,
// twice (RX and TX rings), each block rounded up to a power of two pages: at
// MTU 1500, 83 blocks of 396 KiB take 512 KiB each, about 83 MiB per port.
inline constexpr uint32_t kAfPacketMinRingBytes = 32u << 20;
// memif: buffer sizes are rounded up to this, and ring sizes (log2) capped.
inline constexpr uint32_t kMemifBufferRoundBytes = 1024;
inline constexpr uint32_t kMemifMaxLog2Ring = 14;
// memif: pause between stopping and closing a port (see DpdkPort::~DpdkPort).
inline constexpr uint32_t kMemifCloseSettleUs = 100'000;

}  // namespace dsm::net

#endif  // DSM_NET_TUNING_H_
