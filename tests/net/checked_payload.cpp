#include "tests/net/checked_payload.h"

#include <xxhash.h>

#include <cstring>

namespace dsm::net {

void Fill(uint8_t* p, size_t bytes, uint32_t seq) {
  std::memcpy(p, &seq, 4);
  const uint32_t n = static_cast<uint32_t>(bytes);
  std::memcpy(p + 4, &n, 4);
  for (size_t i = 8; i + 8 < bytes; ++i) p[i] = static_cast<uint8_t>(seq * 7 + i);
  const uint64_t h = XXH3_64bits(p, bytes - 8);
  std::memcpy(p + bytes - 8, &h, 8);
}

bool Check(std::span<const uint8_t> p, uint32_t* seq) {
  if (p.size() < 16) return false;
  uint32_t n = 0;
  std::memcpy(seq, p.data(), 4);
  std::memcpy(&n, p.data() + 4, 4);
  uint64_t h = 0;
  std::memcpy(&h, p.data() + p.size() - 8, 8);
  return n == p.size() && h == XXH3_64bits(p.data(), p.size() - 8);
}

}  // namespace dsm::net
