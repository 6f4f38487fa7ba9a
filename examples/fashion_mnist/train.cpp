// Fashion-MNIST, data-parallel SGD across hosts on libdsm.
//
// W workers (one process per host, or several on one host) train one classifier.
// Worker k is the single writer of the area "<prefix>/delta/<k>": its cumulative
// update, the sum of every -lr * gradient step it has applied, as floats. It
// attaches the other workers' delta areas read-only by name. The model a worker
// computes with is
//
//     initial weights (same seed everywhere) + sum over workers of their delta
//
// as this process sees the deltas: its own exactly, the others' at the versions
// that have reached it. Each step a worker takes a minibatch of its shard of the
// training set, computes the gradient with that view, adds -lr * gradient to its
// delta, logs the area and publishes it (version = steps done), then applies the
// staleness bound (SSP): before its next step it waits (dsm_wait_version) until
// every other worker's version is at least (own steps - S).
//
//   fashion_mnist --model mlp --epochs 2 --workers 3 --rank 0 --json out.json
//
// Worker 0 evaluates the test set after every epoch; after the last epoch every
// worker waits for all others' final versions first, so the final accuracy is the
// one of the complete model. Then each publishes a "done" mark and leaves once it
// has everyone's. The same binary with --workers 1 is the single-host baseline.
// See examples/fashion_mnist/README.md.
#include <dsm/dsm.hpp>

#include <cblas.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "idx.h"
#include "model.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of this process (user + system, all threads), to tell waiting for a
// core from computing when workers and daemons share few cores.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

// Pixel normalisation: the training set's mean and standard deviation of x/255.
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;

// How long a finished worker waits for the others' done marks before leaving anyway.
constexpr double kLeaveTimeoutS = 10;

void ToFloat(const uint8_t* px, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) {
    out[i] = (static_cast<float>(px[i]) * (1.f / 255.f) - kPixelMean) * (1.f / kPixelStd);
  }
}

struct Options {
  std::string model = "mlp";
  size_t hidden = 1024;
  int epochs = 2;
  size_t batch = 64;
  float lr = 0.1f;
  float momentum = 0.f;
  std::string schedule = "cosine";
  double warmup = 0.05;  // fraction of the run with a linear ramp of the learning rate
  int workers = 1;
  int rank = 0;
  uint64_t seed = 1;
  int staleness = 3;
  std::string json;
  std::string data = fmnist::kDefaultDataDir;
  std::string prefix = "fmnist";
  double wait_timeout_s = 60;
  double attach_timeout_s = 60;
  size_t steps_per_epoch = 0;  // 0: the whole shard
  size_t test_limit = 10000;
  int evals_per_epoch = 1;
  int blas_threads = 1;
  uint32_t reader_buffers = 3;
  bool quiet = false;
  // Managed sync (dsm_alloc_managed): the own update reaches each other host
  // within this many MB/s, its largest relative changes first; 0: whole.
  double managed_mbps = 0;
  uint32_t max_line_age = 8;
  // How a change is ranked: "absolute" (|new - old|) or "relative" (to |old|).
  // Absolute trained better here at a quarter of the bytes (the README).
  std::string managed_rank = "absolute";
  // The model is w0 + the mean of the workers' updates rather than their sum.
  bool average = false;
  // The updates are not exchanged (the others' stay zero); only the step
  // counts are, so the staleness bound still holds. Each step does the same
  // work as with sync: its step time is training when moving the update
  // costs nothing.
  bool no_sync = false;
};

// Per-step measurements, kept for the JSON summary.
struct StepRecord {
  float compute_ms;
  float publish_ms;
  float wait_ms;
  int32_t staleness_max;  // own steps - oldest other worker's version, at the step's view
  float loss;
};

// A point of worker 0's test accuracy curve.
struct CurvePoint {
  double wall_s;  // since training began
  uint64_t step;
  double test_accuracy;
};

struct EpochRecord {
  int epoch = 0;
  double wall_s = 0;   // since training began, at the end of this epoch (after evaluation)
  double epoch_s = 0;  // this epoch's duration
  double train_loss = 0;
  double test_accuracy = -1;  // -1: not evaluated by this worker
  double test_loss = -1;
  size_t steps = 0;
  double versions_per_s = 0;       // own publishes per second
  double recv_versions_per_s = 0;  // other workers' versions that reached this process, per second
  double staleness_mean = 0;
  int staleness_max = 0;
  double samples_per_s = 0;          // this worker
  double cluster_samples_per_s = 0;  // all workers, from the versions seen
  double compute_s = 0, publish_s = 0, wait_s = 0, eval_s = 0;
};

int Fail(const char* what, const dsm::Status& st) {
  std::fprintf(stderr, "fashion_mnist: %s: %s\n", what, st.ToString().c_str());
  return 1;
}

class Trainer {
 public:
  explicit Trainer(const Options& o)
      : o_(o),
        model_(o.model == "softmax" ? std::vector<size_t>{784, 10}
                                    : std::vector<size_t>{784, o.hidden, o.hidden, 10}) {}

  int Run();

 private:
  bool LoadData();
  bool SetUpAreas();
  // Current view: params_ = w0 + own delta + the others' deltas as seen now.
  void AssembleView();
  // Publishes the own delta as version `v`; retries while local readers hold buffers.
  bool Publish(uint64_t v);
  // Waits until every other worker's version is >= v (timeout_s < 0: --wait-timeout).
  // False on timeout, with an error (or a warning when !fatal).
  bool WaitOthers(uint64_t v, const char* why, double timeout_s = -1, bool fatal = true);
  double Evaluate(double* loss);
  // Worker 0: evaluates the current view and adds a point to the curve.
  void AddCurvePoint(double wall_s, uint64_t step);
  void Print(const EpochRecord& e) const;
  bool WriteJson(const std::vector<EpochRecord>& epochs, double total_s) const;
  // Version this worker sees of worker j's update. Cannot fail: the handle was
  // checked at attach and the session outlives the trainer.
  // Managed sync: versions of a managed area also carry lines that waited,
  // so steps are counted by a small area of their own ("<prefix>/step/<k>",
  // one version per step) and VersionOf reads that; so does --no-sync.
  uint64_t VersionOf(int j) const {
    uint64_t v = 0;
    if (counts_steps()) {
      others_steps_[static_cast<size_t>(j)].version(&v);
    } else {
      others_[static_cast<size_t>(j)].version(&v);
    }
    return v;
  }
  uint64_t DeltaVersionOf(int j) const {
    uint64_t v = 0;
    if (o_.no_sync) return 1;  // every area counts in the view, as once all have published
    others_[static_cast<size_t>(j)].version(&v);
    return v;
  }
  bool managed() const { return o_.managed_mbps > 0; }
  bool counts_steps() const { return managed() || o_.no_sync; }
  // The step areas: this worker's, and the others' attached.
  bool SetUpStepAreas();
  // Managed sync, after the last step: waits until this host's dsmd sent
  // every line of the own update (calling dsm_service, which publishes what
  // waits), then tells the others at which version it did (step area [1]).
  bool ConvergeOwn(uint64_t steps);
  // ... and waits until this process sees every other worker's update at
  // the version it converged at.
  bool WaitOthersConverged(uint64_t steps);
  // Publishes the step area: `steps` done, `converged_at` as above, and
  // (managed) the own update's version at that point.
  bool PublishSteps(uint64_t steps, uint64_t converged_at);
  // Managed sync at staleness 0, once every other worker counted this step:
  // waits until this process sees each one's update at the version its step
  // area names (that of this step, or of the next one if that worker got
  // there already: published either way).
  bool WaitOthersDeltas();
  // Waits until this process sees each other worker's update at the version
  // in slot `slot` of its step area (`what` it is, for the message).
  bool WaitOthersUpdates(size_t slot, const char* what);

  Options o_;
  fmnist::Model model_;
  fmnist::Split train_, test_;
  std::vector<float> test_x_;
  std::vector<size_t> shard_;
  size_t steps_per_epoch_ = 0;

  std::vector<float> w0_, params_, velocity_, grad_;
  // The updates the view is made of: the areas', or with --no-sync local arrays.
  float* own_data_ = nullptr;
  std::vector<const float*> other_data_;  // indexed by worker; null at own rank
  std::vector<float> local_own_;
  std::vector<std::vector<float>> local_others_;
  dsm::Writable<float> own_;
  std::vector<dsm::Readable<float>> others_;  // indexed by worker; empty handle at own rank
  // Managed sync: step counts (and converged versions) of this worker and the others.
  dsm::Writable<uint64_t> own_steps_;
  std::vector<dsm::Readable<uint64_t>> others_steps_;
  std::vector<StepRecord> steps_;
  uint64_t publish_retries_ = 0;
  std::string area_name_;
  std::vector<CurvePoint> curve_;
  double cpu_s_ = 0;  // process CPU time during training
};

bool Trainer::LoadData() {
  std::string err;
  if (!fmnist::LoadSplit(o_.data, "train", &train_, &err) ||
      !fmnist::LoadSplit(o_.data, "t10k", &test_, &err)) {
    std::fprintf(stderr, "fashion_mnist: %s\n", err.c_str());
    return false;
  }
  if (train_.dim() != model_.input_dim() || test_.dim() != model_.input_dim()) {
    std::fprintf(stderr, "fashion_mnist: images are %zux%zu, the model expects %zu pixels\n",
                 train_.rows, train_.cols, model_.input_dim());
    return false;
  }
  const size_t n_test = std::min(o_.test_limit, test_.n);
  test_x_.resize(n_test * test_.dim());
  ToFloat(test_.pixels.data(), test_x_.size(), test_x_.data());

  // The same permutation everywhere; worker k takes every W-th example of it.
  std::vector<size_t> perm(train_.n);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(o_.seed ^ 0x5eed5eedULL);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t i = static_cast<size_t>(o_.rank); i < perm.size(); i += static_cast<size_t>(o_.workers)) {
    shard_.push_back(perm[i]);
  }
  // Every worker takes the same number of steps (SSP counts steps), from the
  // smallest shard.
  steps_per_epoch_ = (train_.n / static_cast<size_t>(o_.workers)) / o_.batch;
  if (o_.steps_per_epoch != 0) steps_per_epoch_ = std::min(steps_per_epoch_, o_.steps_per_epoch);
  if (steps_per_epoch_ == 0) {
    std::fprintf(stderr, "fashion_mnist: a shard of %zu examples holds no batch of %zu\n",
                 train_.n / static_cast<size_t>(o_.workers), o_.batch);
    return false;
  }
  return true;
}

bool Trainer::SetUpAreas() {
  other_data_.assign(static_cast<size_t>(o_.workers), nullptr);
  if (o_.no_sync) {
    local_own_.assign(model_.num_params(), 0.f);
    own_data_ = local_own_.data();
    local_others_.resize(static_cast<size_t>(o_.workers));
    for (int j = 0; j < o_.workers; ++j) {
      if (j == o_.rank) continue;
      local_others_[static_cast<size_t>(j)].assign(model_.num_params(), 0.f);
      other_data_[static_cast<size_t>(j)] = local_others_[static_cast<size_t>(j)].data();
    }
    area_name_ = "(none: --no-sync)";
    return SetUpStepAreas();
  }
  area_name_ = o_.prefix + "/delta/" + std::to_string(o_.rank);
  // Three reader buffers rather than two: a reader computing on one version
  // (pinning its buffer) while the next is the latest leaves a third buffer to
  // publish into, so the daemons replicating the area never wait for it.
  dsm_alloc_opts opts{};
  opts.reader_buffers = o_.reader_buffers;
  if (managed()) {
    dsm_managed_opts m{};
    m.budget_bytes_per_s = static_cast<uint64_t>(o_.managed_mbps * 1e6);
    m.max_line_age = o_.max_line_age;
    m.element = o_.managed_rank == "absolute" ? DSM_ELEMENT_FLOAT32_ABSOLUTE : DSM_ELEMENT_FLOAT32;
    own_ = dsm::alloc_managed<float>(area_name_, model_.num_params(), m, &opts);
  } else {
    own_ = dsm::alloc<float>(area_name_, model_.num_params(), &opts);
  }
  if (!own_) {
    std::fprintf(stderr, "fashion_mnist: cannot allocate '%s' (%zu floats): %s\n",
                 area_name_.c_str(), model_.num_params(),
                 own_.creation_status().ToString().c_str());
    if (own_.creation_status().code() == DSM_ERR_EXISTS) {
      std::fprintf(stderr, "fashion_mnist: another run (or a worker with the same --rank) still "
                           "holds it; use another --prefix or restart the daemons\n");
    }
    return false;
  }
  // The writer copy of a new area is not promised to be zero: start it at the
  // update 0 (managed: the model w0, see AssembleView). Readers ignore an area
  // until its first version, so nothing needs publishing here.
  if (managed()) {
    std::copy(w0_.begin(), w0_.end(), own_.data());
  } else {
    std::memset(own_.data(), 0, model_.num_params() * sizeof(float));
  }
  own_data_ = own_.data();
  others_.resize(static_cast<size_t>(o_.workers));
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o_.attach_timeout_s * 1000));
  for (int j = 0; j < o_.workers; ++j) {
    if (j == o_.rank) continue;
    const std::string name = o_.prefix + "/delta/" + std::to_string(j);
    auto r = dsm::attach<float>(name, timeout);
    if (!r) {
      std::fprintf(stderr, "fashion_mnist: worker %d: cannot attach '%s' of worker %d within "
                           "%.0f s: %s (is worker %d running, with the same --prefix?)\n",
                   o_.rank, name.c_str(), j, o_.attach_timeout_s,
                   r.creation_status().ToString().c_str(), j);
      return false;
    }
    if (r.size() < model_.num_params()) {
      std::fprintf(stderr, "fashion_mnist: '%s' holds %zu floats, this model needs %zu: the "
                           "workers run different --model/--hidden\n",
                   name.c_str(), r.size(), model_.num_params());
      return false;
    }
    others_[static_cast<size_t>(j)] = std::move(r);
    other_data_[static_cast<size_t>(j)] = others_[static_cast<size_t>(j)].data();
  }
  return !managed() || SetUpStepAreas();
}

bool Trainer::SetUpStepAreas() {
  const std::string own_name = o_.prefix + "/step/" + std::to_string(o_.rank);
  own_steps_ = dsm::alloc<uint64_t>(own_name, 8);
  if (!own_steps_) {
    std::fprintf(stderr, "fashion_mnist: cannot allocate '%s': %s\n", own_name.c_str(),
                 own_steps_.creation_status().ToString().c_str());
    return false;
  }
  std::memset(own_steps_.data(), 0, 8 * sizeof(uint64_t));
  others_steps_.resize(static_cast<size_t>(o_.workers));
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o_.attach_timeout_s * 1000));
  for (int j = 0; j < o_.workers; ++j) {
    if (j == o_.rank) continue;
    const std::string name = o_.prefix + "/step/" + std::to_string(j);
    auto sr = dsm::attach<uint64_t>(name, timeout);
    if (!sr) {
      std::fprintf(stderr,
                   "fashion_mnist: worker %d: cannot attach '%s': %s (do all workers run "
                   "with the same --managed-mbps or --no-sync?)\n",
                   o_.rank, name.c_str(), sr.creation_status().ToString().c_str());
      return false;
    }
    others_steps_[static_cast<size_t>(j)] = std::move(sr);
  }
  return true;
}

// out = a * w0 + s * (m_1 + ... + m_k) in one pass over memory: a block of out
// stays in L1 while every input adds to it, so each input is read once and out
// written once (whole-array BLAS calls would stream out through memory k+1
// times). OpenBLAS's kernels use the CPU's widest vectors; this build's own
// code targets x86-64-v2.
void CombineView(float a, const float* w0, float s, const std::vector<const float*>& ms, float* out,
                 size_t n) {
  constexpr size_t kBlock = 2048;  // floats: 8 KiB of out per block
  for (size_t b = 0; b < n; b += kBlock) {
    const int len = static_cast<int>(std::min(kBlock, n - b));
    cblas_scopy(len, w0 + b, 1, out + b, 1);
    if (a != 1.f) cblas_sscal(len, a, out + b, 1);
    for (const float* m : ms) cblas_saxpy(len, s, m + b, 1, out + b, 1);
  }
}

void Trainer::AssembleView() {
  // --average: the mean of the workers' updates, as if each step's rate were lr / W.
  const float scale = o_.average ? 1.f / static_cast<float>(o_.workers) : 1.f;
  std::vector<const float*> seen{own_data_};
  for (int j = 0; j < o_.workers; ++j) {
    // Version 0: nothing published yet.
    if (j != o_.rank && DeltaVersionOf(j) != 0) seen.push_back(other_data_[static_cast<size_t>(j)]);
  }
  // Unmanaged: w0 + scale * sum(update_k). Managed: area k holds worker k's
  // model m_k = w0 + update_k, so that the priority of a change (relative to
  // what readers hold) is relative to the weight it moves, as in Boesen; the
  // same view is then (1 - seen * scale) * w0 + scale * sum(m_k) over the
  // areas seen so far.
  const float w0_scale = managed() ? 1.f - static_cast<float>(seen.size()) * scale : 1.f;
  CombineView(w0_scale, w0_.data(), scale, seen, params_.data(), params_.size());
}

bool Trainer::Publish(uint64_t v) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(o_.wait_timeout_s);
  for (;;) {
    const dsm::Status st = own_.publish();
    if (st.ok()) break;
    if (st.code() != DSM_ERR_BUSY || Clock::now() > deadline) {
      std::fprintf(stderr, "fashion_mnist: worker %d: publishing step %" PRIu64 " failed: %s\n",
                   o_.rank, v, st.ToString().c_str());
      return false;
    }
    ++publish_retries_;  // local readers hold every spare buffer: they move on at their next sync
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (managed()) return PublishSteps(v, 0);
  uint64_t published = 0;
  if (const dsm::Status st = own_.version(&published); !st.ok()) {
    std::fprintf(stderr, "fashion_mnist: worker %d: version of '%s': %s\n", o_.rank,
                 area_name_.c_str(), st.ToString().c_str());
    return false;
  }
  if (published != v) {
    std::fprintf(stderr, "fashion_mnist: worker %d: after step %" PRIu64 " '%s' is at version %"
                 PRIu64 "; expected one version per step\n",
                 o_.rank, v, area_name_.c_str(), published);
    return false;
  }
  return true;
}

bool Trainer::PublishSteps(uint64_t steps, uint64_t converged_at) {
  own_steps_.data()[0] = steps;
  own_steps_.data()[1] = converged_at;
  uint64_t delta_version = 0;
  if (managed()) own_.version(&delta_version);
  own_steps_.data()[2] = delta_version;
  const auto deadline = Clock::now() + std::chrono::duration<double>(o_.wait_timeout_s);
  dsm::Status st;
  if (!own_steps_.log(0, 3).ok()) return false;
  while (!(st = own_steps_.publish()).ok()) {
    if (st.code() != DSM_ERR_BUSY || Clock::now() > deadline) {
      std::fprintf(stderr,
                   "fashion_mnist: worker %d: publishing its step count %" PRIu64 " failed: %s\n",
                   o_.rank, steps, st.ToString().c_str());
      return false;
    }
    ++publish_retries_;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  uint64_t v = 0;
  own_steps_.version(&v);
  if (v != steps) {
    std::fprintf(stderr,
                 "fashion_mnist: worker %d: its step area is at version %" PRIu64
                 " after step %" PRIu64 "; expected one version per step\n",
                 o_.rank, v, steps);
    return false;
  }
  return true;
}

bool Trainer::ConvergeOwn(uint64_t steps) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(o_.wait_timeout_s);
  uint64_t at = 0;
  for (;;) {
    // A due dsm_service publishes a version with nothing changed while
    // lines wait, so that they can go.
    dsm_service();
    own_.version(&at);
    dsm_managed_status st{};
    if (const dsm::Status s = own_.managed_status(&st); !s.ok()) {
      Fail("managed status", s);
      return false;
    }
    if (!st.exported || (st.as_of_version == at && st.residual_lines == 0)) break;
    if (Clock::now() > deadline) {
      std::fprintf(stderr,
                   "fashion_mnist: worker %d: %" PRIu64
                   " lines of its update still "
                   "wait to be sent after %.0f s (raise --managed-mbps?)\n",
                   o_.rank, st.residual_lines, o_.wait_timeout_s);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return PublishSteps(steps + 1, at);
}

bool Trainer::WaitOthersConverged(uint64_t steps) {
  if (!WaitOthers(steps + 1, "final barrier (every worker's update sent whole)")) return false;
  dsm_service();  // the step areas' newest versions, with the versions to wait for
  return WaitOthersUpdates(1, "at which it sent every line");
}

bool Trainer::WaitOthersUpdates(size_t slot, const char* what) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o_.wait_timeout_s * 1000));
  for (int j = 0; j < o_.workers; ++j) {
    if (j == o_.rank) continue;
    const uint64_t at = others_steps_[static_cast<size_t>(j)][slot];
    if (const dsm::Status st = others_[static_cast<size_t>(j)].wait_version(at, timeout);
        !st.ok()) {
      std::fprintf(stderr,
                   "fashion_mnist: worker %d: worker %d's update never reached version "
                   "%" PRIu64 " here (the version %s): %s\n",
                   o_.rank, j, at, what, st.ToString().c_str());
      return false;
    }
  }
  return true;
}

bool Trainer::WaitOthers(uint64_t v, const char* why, double timeout_s, bool fatal) {
  if (timeout_s < 0) timeout_s = o_.wait_timeout_s;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (int j = 0; j < o_.workers; ++j) {
    if (j == o_.rank || VersionOf(j) >= v) continue;
    const dsm::Status st = counts_steps()
                               ? others_steps_[static_cast<size_t>(j)].wait_version(v, timeout)
                               : others_[static_cast<size_t>(j)].wait_version(v, timeout);
    if (!st.ok()) {
      dsm_area_status as{};
      others_[static_cast<size_t>(j)].area_status(&as);
      std::fprintf(stderr,
                   "fashion_mnist: %sworker %d: %s: worker %d's update is at version %" PRIu64
                   " (latest on this host %" PRIu64 "), needed %" PRIu64 " within %.0f s; its "
                   "writer is %s, its data %.1f s old (is worker %d still running?): %s\n",
                   fatal ? "" : "warning: ", o_.rank, why, j, VersionOf(j), as.latest_version, v,
                   timeout_s, as.writer_alive ? "reported alive" : "gone",
                   static_cast<double>(as.staleness_ns) / 1e9, j, st.ToString().c_str());
      return false;
    }
  }
  return true;
}

bool Trainer::WaitOthersDeltas() {
  // A step count can overtake the update it counts (dsmd sends a small
  // version ahead of a large one): the view waits for the update, as it
  // would for an unmanaged area.
  return WaitOthersUpdates(2, "its step count names");
}

double Trainer::Evaluate(double* loss) {
  constexpr size_t kEvalBatch = 500;
  const size_t n = test_x_.size() / model_.input_dim();
  fmnist::Model::Workspace ws(model_, kEvalBatch);
  size_t correct = 0;
  double loss_sum = 0;
  for (size_t i = 0; i < n; i += kEvalBatch) {
    const size_t b = std::min(kEvalBatch, n - i);
    correct += model_.Evaluate(params_.data(), test_x_.data() + i * model_.input_dim(),
                               test_.labels.data() + i, b, ws, &loss_sum);
  }
  *loss = loss_sum / static_cast<double>(n);
  return static_cast<double>(correct) / static_cast<double>(n);
}

void Trainer::AddCurvePoint(double wall_s, uint64_t step) {
  AssembleView();
  double loss;
  curve_.push_back({wall_s, step, Evaluate(&loss)});
}

void Trainer::Print(const EpochRecord& e) const {
  const double busy = e.compute_s + e.publish_s + e.wait_s + e.eval_s;
  auto pct = [&](double x) { return busy > 0 ? 100.0 * x / busy : 0.0; };
  char acc[32];
  if (e.test_accuracy >= 0) {
    std::snprintf(acc, sizeof acc, "%.4f", e.test_accuracy);
  } else {
    std::snprintf(acc, sizeof acc, "-");
  }
  std::printf("[worker %d/%d] epoch %d/%d  loss %.4f  test_acc %s  wall %.1f s (epoch %.1f s)  "
              "versions/s %.1f (recv %.1f)  staleness mean %.2f max %d  samples/s %.0f "
              "(cluster %.0f)  time: compute %.0f%% publish %.0f%% wait %.0f%% eval %.0f%%\n",
              o_.rank, o_.workers, e.epoch, o_.epochs, e.train_loss, acc, e.wall_s, e.epoch_s,
              e.versions_per_s, e.recv_versions_per_s, e.staleness_mean, e.staleness_max,
              e.samples_per_s, e.cluster_samples_per_s, pct(e.compute_s), pct(e.publish_s),
              pct(e.wait_s), pct(e.eval_s));
  std::fflush(stdout);
}

int Trainer::Run() {
  openblas_set_num_threads(o_.blas_threads);
  if (!LoadData()) return 1;

  dsm::Session session;
  if (!session) return Fail("cannot connect to dsmd", session.status());
  const size_t n = model_.num_params();
  w0_.resize(n);
  params_.resize(n);
  model_.Init(o_.seed, w0_.data());
  if (!SetUpAreas()) return 1;
  if (o_.momentum > 0) velocity_.assign(n, 0.f);
  const uint64_t total_steps = static_cast<uint64_t>(o_.epochs) * steps_per_epoch_;
  // Learning rate of the step after `done` steps: a linear warm-up over the first
  // --warmup of the run (the first updates are the largest, and with several
  // workers they add up before anyone sees them), then constant or a cosine decay
  // to 0. By this worker's own step count: the same in all workers, up to the
  // staleness bound.
  const double warmup_steps = o_.warmup * static_cast<double>(total_steps);
  auto lr_at = [&](uint64_t done) {
    const double x = static_cast<double>(done);
    double lr = o_.lr;
    if (x < warmup_steps) lr *= (x + 1) / (warmup_steps + 1);
    if (o_.schedule == "cosine") {
      const double frac = x / static_cast<double>(total_steps);
      lr *= 0.5 * (1.0 + std::cos(std::numbers::pi * frac));
    }
    return static_cast<float>(lr);
  };
  const size_t dim = model_.input_dim();
  std::vector<float> xb(o_.batch * dim);
  std::vector<uint8_t> yb(o_.batch);
  fmnist::Model::Workspace ws(model_, o_.batch);

  if (!o_.quiet) {
    std::printf("[worker %d/%d] model %s %s, %zu-example shard, %zu steps of %zu per epoch, "
                "lr %g (%s), momentum %g, staleness bound %d, area '%s' (%.1f MiB)\n",
                o_.rank, o_.workers, o_.model.c_str(), model_.Describe().c_str(), shard_.size(),
                steps_per_epoch_, o_.batch, static_cast<double>(o_.lr), o_.schedule.c_str(),
                static_cast<double>(o_.momentum), o_.staleness, area_name_.c_str(),
                static_cast<double>(n * sizeof(float)) / (1 << 20));
    std::fflush(stdout);
  }

  std::vector<EpochRecord> epochs;
  std::mt19937_64 shuffle_rng(o_.seed * 1000003ULL + static_cast<uint64_t>(o_.rank));
  uint64_t t = 0;  // steps done == own version
  // The untrained model starts the curve (not timed: before the clock starts).
  if (o_.rank == 0) AddCurvePoint(0, 0);
  const double cpu_start = ProcessCpuSeconds();
  const auto start = Clock::now();
  // Intermediate evaluations (worker 0, --evals-per-epoch): after the steps where
  // (steps done in the epoch) * evals / steps_per_epoch reaches the next integer,
  // evenly spaced and never at the epoch's last step, which has its own
  // evaluation (937 steps in 4 parts had put one at step 936, one step before it).
  const size_t evals = static_cast<size_t>(o_.evals_per_epoch);
  auto eval_after = [&](size_t done) {
    return done < steps_per_epoch_ &&
           done * evals / steps_per_epoch_ > (done - 1) * evals / steps_per_epoch_;
  };
  for (int epoch = 1; epoch <= o_.epochs; ++epoch) {
    EpochRecord e;
    e.epoch = epoch;
    const auto epoch_start = Clock::now();
    uint64_t seen_start = 0;
    for (int j = 0; j < o_.workers; ++j) seen_start += j == o_.rank ? 0 : VersionOf(j);
    std::shuffle(shard_.begin(), shard_.end(), shuffle_rng);
    double loss_sum = 0, staleness_sum = 0;
    size_t staleness_count = 0;
    for (size_t s = 0; s < steps_per_epoch_; ++s) {
      const auto t0 = Clock::now();
      int64_t step_stale = 0;
      for (int j = 0; j < o_.workers; ++j) {
        if (j == o_.rank) continue;
        const int64_t d = std::max<int64_t>(0, static_cast<int64_t>(t) - static_cast<int64_t>(VersionOf(j)));
        step_stale = std::max(step_stale, d);
        staleness_sum += static_cast<double>(d);
        ++staleness_count;
      }
      AssembleView();
      for (size_t b = 0; b < o_.batch; ++b) {
        const size_t idx = shard_[s * o_.batch + b];
        ToFloat(train_.pixels.data() + idx * dim, dim, xb.data() + b * dim);
        yb[b] = train_.labels[idx];
      }
      double loss;
      const float lr = lr_at(t);
      if (o_.momentum > 0) {
        // velocity = momentum * velocity + grad; delta -= lr * velocity.
        cblas_sscal(static_cast<int>(n), o_.momentum, velocity_.data(), 1);
        loss = model_.TrainStep(params_.data(), xb.data(), yb.data(), o_.batch, 1.f,
                                velocity_.data(), ws);
        cblas_saxpy(static_cast<int>(n), -lr, velocity_.data(), 1, own_data_, 1);
      } else {
        loss = model_.TrainStep(params_.data(), xb.data(), yb.data(), o_.batch, -lr, own_data_, ws);
      }
      if (!std::isfinite(loss)) {
        std::fprintf(stderr, "fashion_mnist: worker %d: loss is %f at step %" PRIu64
                     ": diverged (lower --lr)\n", o_.rank, loss, t + 1);
        return 1;
      }
      loss_sum += loss;
      const auto t1 = Clock::now();
      if (o_.no_sync) {
        if (!PublishSteps(t + 1, 0)) return 1;
      } else {
        own_.log(0, n);  // every parameter moved: the whole area is part of the version
        if (!Publish(t + 1)) return 1;
      }
      ++t;
      session.service();  // move the replicas of the others' deltas to their newest versions
      const auto t2 = Clock::now();
      if (t > static_cast<uint64_t>(o_.staleness) &&
          !WaitOthers(t - static_cast<uint64_t>(o_.staleness), "staleness bound")) {
        return 1;
      }
      if (managed() && o_.staleness == 0 && !WaitOthersDeltas()) return 1;
      const auto t3 = Clock::now();
      StepRecord r{static_cast<float>(Seconds(t0, t1) * 1e3), static_cast<float>(Seconds(t1, t2) * 1e3),
                   static_cast<float>(Seconds(t2, t3) * 1e3), static_cast<int32_t>(step_stale),
                   static_cast<float>(loss)};
      steps_.push_back(r);
      e.compute_s += Seconds(t0, t1);
      e.publish_s += Seconds(t1, t2);
      e.wait_s += Seconds(t2, t3);
      e.staleness_max = std::max<int>(e.staleness_max, static_cast<int>(step_stale));
      if (o_.rank == 0 && eval_after(s + 1)) {
        AddCurvePoint(Seconds(start, Clock::now()), t);
        e.eval_s += Seconds(t3, Clock::now());
      }
    }
    e.steps = steps_per_epoch_;
    e.train_loss = loss_sum / static_cast<double>(steps_per_epoch_);
    e.staleness_mean = staleness_count ? staleness_sum / static_cast<double>(staleness_count) : 0;
    const auto train_end = Clock::now();
    const bool last = epoch == o_.epochs;
    if (last) {
      if (!WaitOthers(t, "final barrier (every worker's last update)")) return 1;
      if (o_.no_sync) {
        if (!PublishSteps(t + 1, 0)) return 1;  // the done mark
      } else if (managed()) {
        // Every line of every update reaches every host before the final
        // evaluation: step mark t+1 says "all of mine went out", t+2 "I hold
        // everyone's".
        if (!ConvergeOwn(t) || !WaitOthersConverged(t)) return 1;
        if (!PublishSteps(t + 2, own_steps_.data()[1])) return 1;
      } else {
        // Version t+1, same content: "I hold every worker's final update". A
        // worker leaves only when all others said so (below): a version
        // published just before its writer exits may never leave the host
        // (see the README), so no worker exits while another may still need
        // its last update.
        own_.log(0, 1);
        if (!Publish(t + 1)) return 1;
      }
    }
    uint64_t seen_end = 0;  // training steps of the others seen (not their done marks)
    for (int j = 0; j < o_.workers; ++j) seen_end += j == o_.rank ? 0 : std::min(VersionOf(j), t);
    const auto eval_start = Clock::now();
    e.wait_s += Seconds(train_end, eval_start);
    if (o_.rank == 0) {
      AssembleView();
      e.test_accuracy = Evaluate(&e.test_loss);
      // The curve's times are when the evaluated model existed, before its evaluation.
      curve_.push_back({Seconds(start, eval_start), t, e.test_accuracy});
    }
    const auto end = Clock::now();
    e.eval_s += Seconds(eval_start, end);
    e.epoch_s = Seconds(epoch_start, end);
    e.wall_s = Seconds(start, end);
    e.versions_per_s = static_cast<double>(e.steps) / e.epoch_s;
    e.recv_versions_per_s = static_cast<double>(seen_end - seen_start) / e.epoch_s;
    e.samples_per_s = static_cast<double>(e.steps * o_.batch) / e.epoch_s;
    e.cluster_samples_per_s =
        static_cast<double>((e.steps + seen_end - seen_start) * o_.batch) / e.epoch_s;
    epochs.push_back(e);
    Print(e);
  }
  const double total_s = Seconds(start, Clock::now());
  cpu_s_ = ProcessCpuSeconds() - cpu_start;
  if (!o_.json.empty() && !WriteJson(epochs, total_s)) return 1;
  // Stay until every other worker holds the final model (their version t+1). Not
  // an error past the timeout: this worker has everything; another may be slow.
  WaitOthers(managed() ? t + 2 : t + 1, "leaving (other workers' done marks)",
             std::min(o_.wait_timeout_s, kLeaveTimeoutS), /*fatal=*/false);
  return 0;
}

bool Trainer::WriteJson(const std::vector<EpochRecord>& epochs, double total_s) const {
  using nlohmann::json;
  json j;
  j["example"] = "fashion_mnist";
  j["config"] = {{"model", o_.model},
                 {"architecture", model_.Describe()},
                 {"parameters", model_.num_params()},
                 {"workers", o_.workers},
                 {"rank", o_.rank},
                 {"epochs", o_.epochs},
                 {"batch", o_.batch},
                 {"lr", std::round(static_cast<double>(o_.lr) * 1e6) / 1e6},
                 {"momentum", std::round(static_cast<double>(o_.momentum) * 1e6) / 1e6},
                 {"schedule", o_.schedule},
                 {"warmup", o_.warmup},
                 {"staleness_bound", o_.staleness},
                 {"seed", o_.seed},
                 {"steps_per_epoch", steps_per_epoch_},
                 {"test_examples", test_x_.size() / model_.input_dim()},
                 {"area", area_name_},
                 {"managed_mbps", o_.managed_mbps},
                 {"max_line_age", o_.max_line_age},
                 {"managed_rank", o_.managed_rank},
                 {"average", o_.average},
                 {"no_sync", o_.no_sync},
                 {"area_bytes", model_.num_params() * sizeof(float)}};
  double compute = 0, publish = 0, wait = 0, eval = 0;
  json ep = json::array();
  for (const EpochRecord& e : epochs) {
    compute += e.compute_s;
    publish += e.publish_s;
    wait += e.wait_s;
    eval += e.eval_s;
    json x = {{"epoch", e.epoch},
              {"wall_s", e.wall_s},
              {"epoch_s", e.epoch_s},
              {"train_loss", e.train_loss},
              {"steps", e.steps},
              {"versions_per_s", e.versions_per_s},
              {"recv_versions_per_s", e.recv_versions_per_s},
              {"staleness_mean", e.staleness_mean},
              {"staleness_max", e.staleness_max},
              {"samples_per_s", e.samples_per_s},
              {"cluster_samples_per_s", e.cluster_samples_per_s},
              {"compute_s", e.compute_s},
              {"publish_s", e.publish_s},
              {"wait_s", e.wait_s},
              {"eval_s", e.eval_s},
              {"sync_fraction", e.publish_s / e.epoch_s},
              {"wait_fraction", e.wait_s / e.epoch_s}};
    if (e.test_accuracy >= 0) {
      x["test_accuracy"] = e.test_accuracy;
      x["test_loss"] = e.test_loss;
    } else {
      x["test_accuracy"] = nullptr;
    }
    ep.push_back(x);
  }
  j["epochs"] = ep;
  j["final_test_accuracy"] =
      epochs.empty() || epochs.back().test_accuracy < 0 ? json(nullptr) : json(epochs.back().test_accuracy);
  j["total_s"] = total_s;
  j["cpu_s"] = cpu_s_;
  json curve = json::array();
  for (const CurvePoint& c : curve_) {
    curve.push_back({{"wall_s", c.wall_s}, {"step", c.step}, {"test_accuracy", c.test_accuracy}});
  }
  j["test_curve"] = curve;
  j["time_s"] = {{"compute", compute}, {"publish", publish}, {"wait", wait}, {"eval", eval}};
  j["time_fraction"] = {{"compute", compute / total_s},
                        {"publish", publish / total_s},
                        {"wait", wait / total_s},
                        {"eval", eval / total_s}};
  j["publish_busy_retries"] = publish_retries_;
  dsm_area_status st{};
  if (own_.area_status(&st).ok()) {
    j["own_area"] = {{"version", st.version}, {"publishes_deferred", st.publishes_deferred}};
  }
  json ps = {{"compute_ms", json::array()}, {"publish_ms", json::array()},
             {"wait_ms", json::array()}, {"staleness", json::array()}, {"loss", json::array()}};
  auto r3 = [](float v) { return std::round(static_cast<double>(v) * 1000) / 1000; };
  for (const StepRecord& r : steps_) {
    ps["compute_ms"].push_back(r3(r.compute_ms));
    ps["publish_ms"].push_back(r3(r.publish_ms));
    ps["wait_ms"].push_back(r3(r.wait_ms));
    ps["staleness"].push_back(r.staleness_max);
    ps["loss"].push_back(r3(r.loss));
  }
  j["per_step"] = ps;
  std::ofstream f(o_.json);
  f << j.dump(1) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "fashion_mnist: cannot write %s\n", o_.json.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Fashion-MNIST data-parallel SGD on libdsm: one worker per host, each the writer "
               "of its cumulative update, reading the others' with a staleness bound"};
  app.option_defaults()->always_capture_default();
  app.add_option("--model", o.model, "mlp (784-H-H-10, ReLU) or softmax (regression)")
      ->check(CLI::IsMember({"mlp", "softmax"}));
  app.add_option("--hidden", o.hidden, "hidden layer width of the MLP")->check(CLI::Range(1, 1 << 16));
  app.add_option("--epochs", o.epochs, "passes over the training set")->check(CLI::Range(1, 1000));
  app.add_option("--batch", o.batch, "minibatch per worker and step")->check(CLI::Range(1, 60000));
  app.add_option("--lr", o.lr, "peak learning rate (after the warm-up)");
  app.add_option("--schedule", o.schedule, "learning rate schedule: cosine (decay to 0 over the "
                 "run) or constant")->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--warmup", o.warmup, "fraction of the run over which the learning rate ramps "
                 "up linearly (0: none)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--momentum", o.momentum, "per-worker momentum (0: plain SGD)")->check(CLI::Range(0.0, 0.999));
  app.add_option("--workers", o.workers, "number of workers W")->check(CLI::Range(1, 64));
  app.add_option("--rank", o.rank, "this worker's index K, 0..W-1")->check(CLI::Range(0, 63));
  app.add_option("--seed", o.seed, "seed of the initial weights and of the data order");
  app.add_option("--staleness", o.staleness, "SSP bound: start step t+1 only when every other "
                 "worker has published at least t-S steps")->check(CLI::Range(0, 1000000));
  app.add_option("--json", o.json, "write a summary (per-epoch accuracy vs wall time, timings) here");
  app.add_option("--data", o.data, "directory of the gzipped IDX files");
  app.add_option("--prefix", o.prefix, "area names are <prefix>/delta/<rank>");
  app.add_option("--wait-timeout", o.wait_timeout_s, "seconds to wait for another worker's version")
      ->check(CLI::PositiveNumber);
  app.add_option("--attach-timeout", o.attach_timeout_s, "seconds to wait for the other workers' areas")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps-per-epoch", o.steps_per_epoch, "cap on the steps per epoch (0: whole shard)");
  app.add_option("--test-limit", o.test_limit, "evaluate on the first N test images")
      ->check(CLI::Range(1, 10000));
  app.add_option("--blas-threads", o.blas_threads, "OpenBLAS threads")->check(CLI::Range(1, 256));
  app.add_option("--reader-buffers", o.reader_buffers, "reader copies of the own area per host")
      ->check(CLI::Range(2, 4));
  app.add_option("--evals-per-epoch", o.evals_per_epoch, "worker 0 evaluates the test set this "
                 "many times per epoch, for the accuracy curve (the last at the epoch's end)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--quiet", o.quiet, "only the per-epoch lines");
  app.add_option("--managed-mbps", o.managed_mbps,
                 "managed sync: send the own update to each "
                 "other host within this many MB/s, largest changes first (0: whole)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--managed-rank", o.managed_rank,
                 "managed sync: rank a change by its absolute size or relative to the old value")
      ->check(CLI::IsMember({"absolute", "relative"}));
  app.add_option("--max-line-age", o.max_line_age,
                 "managed sync: versions a changed line may "
                 "wait")
      ->check(CLI::Range(0, 1000000));
  app.add_flag("--average", o.average,
               "the model is w0 + the mean of the workers' updates "
               "(not their sum): --lr then needs no division by --workers");
  app.add_flag("--no-sync", o.no_sync,
               "exchange only step counts (for the staleness bound), not the updates: each step "
               "does the same work with the others' updates left at zero; its step time is "
               "training when moving the update costs nothing")
      ->excludes("--managed-mbps");
  CLI11_PARSE(app, argc, argv);
  if (o.rank >= o.workers) {
    std::fprintf(stderr, "fashion_mnist: --rank %d is not below --workers %d\n", o.rank, o.workers);
    return 2;
  }
  if (!(o.lr > 0) || !std::isfinite(o.lr)) {
    std::fprintf(stderr, "fashion_mnist: --lr must be a positive number\n");
    return 2;
  }
  Trainer trainer(o);
  return trainer.Run();
}
