#include "model.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace fmnist {

Model::Model(std::vector<size_t> sizes) : sizes_(std::move(sizes)) {
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    w_off_.push_back(num_params_);
    num_params_ += sizes_[l] * sizes_[l + 1];
    b_off_.push_back(num_params_);
    num_params_ += sizes_[l + 1];
  }
}

std::string Model::Describe() const {
  std::string s;
  for (size_t i = 0; i < sizes_.size(); ++i) s += (i ? "-" : "") + std::to_string(sizes_[i]);
  return s + " (" + std::to_string(num_params_) + " parameters)";
}

void Model::Init(uint64_t seed, float* params) const {
  std::fill(params, params + num_params_, 0.f);
  if (num_layers() == 1) return;  // softmax regression: convex, zero is a fine start
  std::mt19937_64 rng(seed);
  for (size_t l = 0; l < num_layers(); ++l) {
    const bool relu_follows = l + 1 < num_layers();
    const double stddev = std::sqrt((relu_follows ? 2.0 : 1.0) / static_cast<double>(sizes_[l]));
    std::normal_distribution<float> dist(0.f, static_cast<float>(stddev));
    float* w = params + w_off_[l];
    for (size_t i = 0; i < sizes_[l] * sizes_[l + 1]; ++i) w[i] = dist(rng);
  }
}

Model::Workspace::Workspace(const Model& m, size_t batch) : max_batch(batch), ones(batch, 1.f) {
  for (size_t l = 0; l < m.num_layers(); ++l) {
    act.emplace_back(batch * m.sizes_[l + 1]);
    delta.emplace_back(batch * m.sizes_[l + 1]);
  }
}

const float* Model::Forward(const float* params, const float* x, size_t batch,
                            Workspace& ws) const {
  const int b = static_cast<int>(batch);
  const float* in = x;
  for (size_t l = 0; l < num_layers(); ++l) {
    const int n_in = static_cast<int>(sizes_[l]);
    const int n_out = static_cast<int>(sizes_[l + 1]);
    float* out = ws.act[l].data();
    const float* bias = params + b_off_[l];
    for (size_t r = 0; r < batch; ++r) std::copy(bias, bias + n_out, out + r * sizes_[l + 1]);
    // out (B x out) += in (B x in) * W (in x out)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, n_out, n_in, 1.f, in, n_in,
                params + w_off_[l], n_out, 1.f, out, n_out);
    if (l + 1 < num_layers()) {
      const size_t count = batch * sizes_[l + 1];
      for (size_t i = 0; i < count; ++i) out[i] = std::max(out[i], 0.f);
    }
    in = out;
  }
  return ws.act.back().data();
}

namespace {

// log(sum(exp(z))) of one row of k logits, computed stably.
double LogSumExp(const float* z, size_t k) {
  const float m = *std::max_element(z, z + k);
  double sum = 0;
  for (size_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(z[j] - m));
  return std::log(sum) + m;
}

}  // namespace

double Model::TrainStep(const float* params, const float* x, const uint8_t* labels, size_t batch,
                        float alpha, float* accum, Workspace& ws) const {
  const float* logits = Forward(params, x, batch, ws);
  const size_t k = classes();
  const size_t last = num_layers() - 1;
  float* d = ws.delta[last].data();
  double loss = 0;
  const float inv_b = 1.f / static_cast<float>(batch);
  for (size_t r = 0; r < batch; ++r) {
    const float* z = logits + r * k;
    const double lse = LogSumExp(z, k);
    loss += lse - z[labels[r]];
    for (size_t j = 0; j < k; ++j) {
      const float p = static_cast<float>(std::exp(static_cast<double>(z[j]) - lse));
      d[r * k + j] = (p - (j == labels[r] ? 1.f : 0.f)) * inv_b;
    }
  }
  const int b = static_cast<int>(batch);
  for (size_t l = num_layers(); l-- > 0;) {
    const int n_in = static_cast<int>(sizes_[l]);
    const int n_out = static_cast<int>(sizes_[l + 1]);
    const float* in = l == 0 ? x : ws.act[l - 1].data();
    const float* dl = ws.delta[l].data();
    // accum_W (in x out) += alpha * in^T (in x B) * delta (B x out)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n_in, n_out, b, alpha, in, n_in, dl,
                n_out, 1.f, accum + w_off_[l], n_out);
    // accum_b (out) += alpha * delta^T (out x B) * ones (B)
    cblas_sgemv(CblasRowMajor, CblasTrans, b, n_out, alpha, dl, n_out, ws.ones.data(), 1, 1.f,
                accum + b_off_[l], 1);
    if (l == 0) break;
    // delta[l-1] (B x in) = delta (B x out) * W^T (out x in), masked by ReLU'.
    float* dprev = ws.delta[l - 1].data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, n_in, n_out, 1.f, dl, n_out,
                params + w_off_[l], n_out, 0.f, dprev, n_in);
    const float* a = ws.act[l - 1].data();
    const size_t count = batch * sizes_[l];
    for (size_t i = 0; i < count; ++i) {
      if (a[i] <= 0.f) dprev[i] = 0.f;
    }
  }
  return loss / static_cast<double>(batch);
}

size_t Model::Evaluate(const float* params, const float* x, const uint8_t* labels, size_t batch,
                       Workspace& ws, double* loss_sum) const {
  const float* logits = Forward(params, x, batch, ws);
  const size_t k = classes();
  size_t correct = 0;
  for (size_t r = 0; r < batch; ++r) {
    const float* z = logits + r * k;
    const size_t pred = static_cast<size_t>(std::max_element(z, z + k) - z);
    if (pred == labels[r]) ++correct;
    if (loss_sum) *loss_sum += LogSumExp(z, k) - z[labels[r]];
  }
  return correct;
}

}  // namespace fmnist
