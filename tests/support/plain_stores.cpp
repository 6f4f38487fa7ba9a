#include "tests/support/plain_stores.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

namespace dsm::testing {

void PlainStoreMutation(uint8_t* area, size_t bytes, uint64_t round, std::mt19937_64& rng) {
  const size_t at = rng() % (bytes / 2);
  const size_t len = 1 + rng() % (bytes / 64);
  switch (round % 4) {
    case 0: {
      std::vector<uint8_t> block(len);
      for (auto& b : block) b = static_cast<uint8_t>(rng());
      std::memcpy(area + at, block.data(), len);
      break;
    }
    case 1: {
      auto* words = reinterpret_cast<uint32_t*>(area + (at & ~size_t{3}));
      std::sort(words, words + len / 4, std::greater<>());
      break;
    }
    case 2:
      std::fill(area + at, area + at + len, static_cast<uint8_t>(round));
      break;
    default: {
      auto* words = reinterpret_cast<uint64_t*>(area);
      for (size_t i = rng() % 97; i < bytes / 8; i += 1 + rng() % 4096) words[i] = round * i + 1;
      break;
    }
  }
  // A mutation can happen to leave the bytes as they were (a sorted range, an
  // equal fill); a counter in the last word guarantees a change per round.
  reinterpret_cast<uint64_t*>(area + bytes)[-1] += 1;
}

}  // namespace dsm::testing
