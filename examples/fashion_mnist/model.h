// A fully connected classifier (ReLU hidden layers, softmax cross-entropy) whose
// parameters are one flat float array, so that a whole model, a gradient or a
// cumulative update is a single contiguous range (one libdsm area). With no hidden
// layer it is softmax regression. Matrix products go through OpenBLAS's CBLAS.
#ifndef EXAMPLES_FASHION_MNIST_MODEL_H_
#define EXAMPLES_FASHION_MNIST_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fmnist {

class Model {
 public:
  // sizes: input, hidden..., classes. E.g. {784, 1024, 1024, 10} or {784, 10}.
  explicit Model(std::vector<size_t> sizes);

  size_t num_params() const { return num_params_; }
  size_t num_layers() const { return sizes_.size() - 1; }
  size_t input_dim() const { return sizes_.front(); }
  size_t classes() const { return sizes_.back(); }
  std::string Describe() const;  // "784-1024-1024-10 (1863690 parameters)"

  // Initial parameters from `seed`: He-normal weights for layers followed by ReLU,
  // N(0, 1/fan_in) for the logits, zero biases; softmax regression starts at zero.
  // The same seed gives the same bytes in every process running this binary.
  void Init(uint64_t seed, float* params) const;

  // Scratch memory for a batch of up to max_batch rows.
  class Workspace {
   public:
    Workspace(const Model& m, size_t max_batch);

   private:
    friend class Model;
    size_t max_batch;
    std::vector<std::vector<float>> act;    // act[l]: output of layer l (B x sizes[l+1])
    std::vector<std::vector<float>> delta;  // delta[l]: dLoss/d(pre-activation of layer l)
    std::vector<float> ones;                // B ones, for bias gradients via gemv
  };

  // Forward and backward pass on a batch (x: batch x input_dim, row-major) with
  // parameters `params`; adds alpha * (gradient of the mean loss) to `accum`
  // (num_params floats; alpha = -lr makes it an SGD step on a cumulative update).
  // Returns the mean cross-entropy of the batch.
  double TrainStep(const float* params, const float* x, const uint8_t* labels, size_t batch,
                   float alpha, float* accum, Workspace& ws) const;

  // Forward pass only: number of rows classified correctly; adds the summed loss
  // to *loss_sum when it is not null.
  size_t Evaluate(const float* params, const float* x, const uint8_t* labels, size_t batch,
                  Workspace& ws, double* loss_sum) const;

 private:
  // Fills ws.act for a batch; returns the logits (ws.act.back()).
  const float* Forward(const float* params, const float* x, size_t batch, Workspace& ws) const;

  std::vector<size_t> sizes_;
  std::vector<size_t> w_off_;  // weights of layer l: sizes_[l] x sizes_[l+1], row-major
  std::vector<size_t> b_off_;  // biases of layer l: sizes_[l+1]
  size_t num_params_ = 0;
};

}  // namespace fmnist

#endif  // EXAMPLES_FASHION_MNIST_MODEL_H_
