// Payloads that prove themselves in the net tests:
// [seq u32][bytes u32][filler][xxh3 u64 of everything before it].
#ifndef DSM_TESTS_NET_CHECKED_PAYLOAD_H_
#define DSM_TESTS_NET_CHECKED_PAYLOAD_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsm::net {

// Writes payload number `seq` of `bytes` (at least 16) at `p`.
void Fill(uint8_t* p, size_t bytes, uint32_t seq);
// Whether `p` is such a payload, whole and unchanged; `*seq` its number.
bool Check(std::span<const uint8_t> p, uint32_t* seq);

}  // namespace dsm::net

#endif  // DSM_TESTS_NET_CHECKED_PAYLOAD_H_
