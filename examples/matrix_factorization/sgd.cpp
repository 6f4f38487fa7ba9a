#include "sgd.h"

#include <random>

namespace mf {

void InitRow(uint64_t seed, uint64_t id, float scale, size_t k, float* out) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL ^ (id + 1) * 0xbf58476d1ce4e5b9ULL);
  std::normal_distribution<float> g(0.f, scale);
  for (size_t d = 0; d < k; ++d) out[d] = g(rng);
}

}  // namespace mf
