// The model: rating(u, i) ~ <p_u, q_i> with k latent factors, trained by plain
// SGD with L2 regularisation, one rating at a time.
#ifndef DSM_EXAMPLES_MATRIX_FACTORIZATION_SGD_H_
#define DSM_EXAMPLES_MATRIX_FACTORIZATION_SGD_H_

#include <cstddef>
#include <cstdint>

namespace mf {

inline float Predict(const float* p, const float* q, size_t k) {
  float s = 0;
  for (size_t d = 0; d < k; ++d) s += p[d] * q[d];
  return s;
}

// One SGD step on rating r with error e = r - <p, q>, from the old p and q:
//   p += lr (e q - reg p),   *dq += lr (e p - reg q).
// dq may be q itself (the caller owns the item) or a separate row that collects
// the update for the item's owner. Returns e.
inline float SgdStep(float* p, const float* q, float r, float lr, float reg, size_t k, float* dq) {
  const float e = r - Predict(p, q, k);
  for (size_t d = 0; d < k; ++d) {
    const float pd = p[d];
    const float qd = q[d];
    p[d] = pd + lr * (e * qd - reg * pd);
    dq[d] += lr * (e * pd - reg * qd);
  }
  return e;
}

// The initial factors of entity `id` (user or item): small N(0, scale) values
// that depend only on (seed, id), so every worker starts any row the same way.
void InitRow(uint64_t seed, uint64_t id, float scale, size_t k, float* out);

}  // namespace mf

#endif  // DSM_EXAMPLES_MATRIX_FACTORIZATION_SGD_H_
