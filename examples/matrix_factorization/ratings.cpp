#include "ratings.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace mf {

namespace {

// Row-major n x k matrix of N(0, sd) entries.
std::vector<float> GaussianMatrix(size_t n, size_t k, double sd, std::mt19937_64& rng) {
  std::normal_distribution<double> g(0.0, sd);
  std::vector<float> m(n * k);
  for (float& x : m) x = static_cast<float>(g(rng));
  return m;
}

}  // namespace

Ratings Generate(const RatingsConfig& c) {
  std::mt19937_64 rng(c.seed * 0x9e3779b97f4a7c15ULL + 0x4d46ULL);
  const size_t k = c.true_rank;
  const double sd = std::pow(static_cast<double>(k), -0.25);
  const std::vector<float> a = GaussianMatrix(c.users, k, sd, rng);
  const std::vector<float> b = GaussianMatrix(c.items, k, sd, rng);

  // Cumulative Zipf weights over popularity ranks, and rank -> item id.
  std::vector<double> cdf(c.items);
  double sum = 0;
  for (uint32_t r = 0; r < c.items; ++r) {
    sum += std::pow(static_cast<double>(r + 1), -c.zipf_s);
    cdf[r] = sum;
  }
  std::vector<uint32_t> item_of_rank(c.items);
  std::iota(item_of_rank.begin(), item_of_rank.end(), 0u);
  std::shuffle(item_of_rank.begin(), item_of_rank.end(), rng);

  Ratings out;
  out.item_count.assign(c.items, 0);
  std::uniform_int_distribution<uint32_t> user(0, c.users - 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> noise(0.0, c.noise);
  double oracle_sse = 0;
  for (size_t n = 0; n < c.ratings; ++n) {
    const uint32_t u = user(rng);
    const size_t rank = static_cast<size_t>(
        std::lower_bound(cdf.begin(), cdf.end(), unit(rng) * sum) - cdf.begin());
    const uint32_t i = item_of_rank[std::min<size_t>(rank, c.items - 1)];
    double truth = 0;
    for (size_t d = 0; d < k; ++d) truth += double{a[u * k + d]} * b[i * k + d];
    const double e = noise(rng);
    const Rating r{u, i, static_cast<float>(truth + e)};
    ++out.item_count[i];
    if (unit(rng) < c.test_fraction) {
      out.test.push_back(r);
      oracle_sse += e * e;
    } else {
      out.train.push_back(r);
    }
  }
  if (!out.test.empty()) out.oracle_test_rmse = std::sqrt(oracle_sse / static_cast<double>(out.test.size()));
  return out;
}

}  // namespace mf
