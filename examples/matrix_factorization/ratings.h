// A synthetic ratings matrix with a known low-rank ground truth and power-law
// (Zipf) item popularity, generated from a seed so that every worker of a run
// builds exactly the same data without exchanging it.
#ifndef DSM_EXAMPLES_MATRIX_FACTORIZATION_RATINGS_H_
#define DSM_EXAMPLES_MATRIX_FACTORIZATION_RATINGS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mf {

struct RatingsConfig {
  uint32_t users = 4000;
  uint32_t items = 4000;
  size_t ratings = 400000;   // before the train/test split
  uint32_t true_rank = 8;    // rank of the ground truth
  double zipf_s = 1.0;       // item of popularity rank r is drawn with weight 1 / r^s
  double noise = 0.3;        // standard deviation of the Gaussian noise: the RMSE floor
  double test_fraction = 0.1;
  uint64_t seed = 1;
};

struct Rating {
  uint32_t user;
  uint32_t item;
  float value;
};

struct Ratings {
  std::vector<Rating> train;
  std::vector<Rating> test;
  // Ratings per item over train + test, indexed by item id.
  std::vector<uint32_t> item_count;
  // RMSE of the ground truth itself on the test set: what a perfect model reaches.
  double oracle_test_rmse = 0;
};

// Ratings r(u, i) = <a_u, b_i> + noise, with a_u, b_i ~ N(0, 1/sqrt(k)) per entry
// (so the noiseless part has unit variance). Users are uniform; the item of a
// rating has popularity rank r with probability proportional to 1 / r^s, and the
// ranks are scattered over the item ids by a seeded permutation, so that hot items
// fall into every shard of a contiguous split. Pairs may repeat (with new noise).
Ratings Generate(const RatingsConfig& c);

}  // namespace mf

#endif  // DSM_EXAMPLES_MATRIX_FACTORIZATION_RATINGS_H_
