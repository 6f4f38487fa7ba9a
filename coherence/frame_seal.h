// How a frame shows it is whole and, in a cluster with keys, who made it
// (docs/wire-format.md, "Seal"). Pure: no sockets, no DPDK.
//
// Without keys a frame carries an XXH3-64 checksum of its header and payload:
// it catches accidents, not forgery. With the cluster's keys a frame carries,
// between its header and payload, an AES-256-GMAC tag (Intel's ipsec-mb, the
// library DPDK's crypto drivers use) over its header and payload; the
// header's flags name the key, and its checksum field holds the sender's
// nonce counter. Only a holder of a key can make a frame that verifies.
//
// Nonce: the sender's incarnation (4 bytes, drawn at its start) and the
// checksum field (its host id in the top 16 bits, a counter from a random
// start in the low 48): unique per key unless one host draws the same
// incarnation twice and the counters meet (below 2^-32 per pair of starts).
#ifndef DSM_COHERENCE_FRAME_SEAL_H_
#define DSM_COHERENCE_FRAME_SEAL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace dsm::wire {

struct Header;
enum class DropReason : uint8_t;

inline constexpr size_t kKeyBytes = 32;  // AES-256
inline constexpr size_t kTagBytes = 16;
// Keys held at once: a change-over needs two (the old and the new).
inline constexpr size_t kMaxKeys = 4;

struct FrameKey {
  uint8_t id = 0;  // carried in every frame; 1..255 (0 means "no key")
  std::array<uint8_t, kKeyBytes> secret{};
};

class FrameSeal {
 public:
  // No keys: checksums only.
  FrameSeal();
  ~FrameSeal();
  FrameSeal(const FrameSeal&) = delete;
  FrameSeal& operator=(const FrameSeal&) = delete;

  // The keys from now on: the first signs what this side sends, every one
  // verifies what it receives. Empty: checksums again. At most kMaxKeys,
  // ids distinct and not 0 (false and nothing changes otherwise).
  bool SetKeys(std::span<const FrameKey> keys);
  bool keyed() const { return !keys_.empty(); }
  uint8_t signing_key_id() const;

  // Where a frame's payload starts: after the header, and the tag if keyed.
  size_t header_bytes() const;

  // Fills in payload_bytes and the seal of a frame whose header and first
  // `payload_bytes` of payload are written at `frame` (payload at
  // header_bytes()), and whose payload goes on with `tail` when one is given.
  // The header's source_host and incarnation must be final.
  void Seal(uint8_t* frame, uint32_t payload_bytes, std::span<const uint8_t> tail = {});

  // Whether `frame` (its header already read into `h`; lengths checked) is
  // sealed as this side expects: kNone, kBadChecksum, kUnauthenticated (no
  // tag where keys are set or a tag where they are not, or a tag that does
  // not verify) or kUnknownKey (a key this side does not hold). `payload`:
  // the bytes after the header and tag.
  DropReason Verify(const Header& h, std::span<const uint8_t> frame,
                    std::span<const uint8_t> payload) const;

 private:
  struct Key;
  const Key* Find(uint8_t id) const;

  std::vector<std::unique_ptr<Key>> keys_;
  uint64_t counter_;  // low 48 bits of the next nonce
};

// The XXH3-64 checksum of a frame without keys: over its header with the
// checksum field zero, its payload, and `tail`.
uint64_t FrameChecksum(const Header& header, std::span<const uint8_t> payload,
                       std::span<const uint8_t> tail = {});

}  // namespace dsm::wire

#endif  // DSM_COHERENCE_FRAME_SEAL_H_
