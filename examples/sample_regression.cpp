// A small end-to-end sample: one process trains a linear model by SGD on
// synthetic data, holding its weights in a libdsm area; reader processes attach
// the same weights read-only and evaluate them on their own data as versions
// arrive, reporting version and staleness.
//
//   sample_regression train  --steps 2000
//   sample_regression follow --versions 200
#include <dsm/dsm.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kDim = 1024;
constexpr const char* kArea = "sample/weights";

// Ground truth the trainer tries to recover; readers know it to score the model.
float TrueWeight(size_t i) { return std::sin(0.01f * static_cast<float>(i)); }

float Loss(const float* w, std::mt19937& rng) {
  std::normal_distribution<float> x(0.f, 1.f);
  double loss = 0;
  constexpr int kSamples = 16;
  std::vector<float> xs(kDim);
  for (int s = 0; s < kSamples; ++s) {
    double pred = 0, truth = 0;
    for (size_t i = 0; i < kDim; ++i) {
      xs[i] = x(rng);
      pred += w[i] * xs[i];
      truth += TrueWeight(i) * xs[i];
    }
    loss += (pred - truth) * (pred - truth);
  }
  return static_cast<float>(loss / kSamples);
}

int Train(int steps) {
  dsm::Session session;
  if (!session) {
    std::fprintf(stderr, "sample: %s\n", session.status().ToString().c_str());
    return 1;
  }
  auto w = dsm::alloc<float>(kArea, kDim);
  if (!w) {
    std::fprintf(stderr, "sample: %s\n", w.creation_status().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> x(0.f, 1.f);
  std::vector<float> xs(kDim);
  const float lr = 1.0f / kDim;
  for (int step = 1; step <= steps; ++step) {
    // One SGD step on a fresh sample: w -= lr * (w.x - y) x.
    double err = 0;
    for (size_t i = 0; i < kDim; ++i) {
      xs[i] = x(rng);
      err += (w.data()[i] - TrueWeight(i)) * xs[i];
    }
    for (size_t i = 0; i < kDim; ++i) w.data()[i] -= lr * static_cast<float>(err) * xs[i];
    w.log(0, kDim);
    session.service();
    if (step % (steps / 10 == 0 ? 1 : steps / 10) == 0) {
      std::mt19937 eval(7);
      uint64_t v = 0;
      w.version(&v);
      std::printf("train  step %5d  version %6lu  loss %.4f\n", step,
                  static_cast<unsigned long>(v), Loss(w.data(), eval));
      std::fflush(stdout);
    }
  }
  w.publish();
  uint64_t v = 0;
  w.version(&v);
  std::printf("train  done: version %lu\n", static_cast<unsigned long>(v));
  return 0;
}

int Follow(int versions) {
  dsm::Session session;
  if (!session) {
    std::fprintf(stderr, "sample: %s\n", session.status().ToString().c_str());
    return 1;
  }
  auto w = dsm::attach<float>(kArea, std::chrono::seconds(10));
  if (!w) {
    std::fprintf(stderr, "sample: %s\n", w.creation_status().ToString().c_str());
    return 1;
  }
  uint64_t seen = 0;
  w.version(&seen);
  for (int i = 0; i < versions; ++i) {
    if (!w.wait_version(seen + 1, std::chrono::seconds(5)).ok()) break;
    w.version(&seen);
    if (i % (versions / 10 == 0 ? 1 : versions / 10) == 0) {
      dsm_area_status st{};
      w.area_status(&st);
      std::mt19937 eval(7);
      std::printf("follow version %6lu  staleness %7.3f ms  loss %.4f\n",
                  static_cast<unsigned long>(seen), static_cast<double>(st.staleness_ns) / 1e6,
                  Loss(w.data(), eval));
      std::fflush(stdout);
    }
  }
  dsm_area_status st{};
  w.area_status(&st);
  std::printf("follow done: version %lu, writer %s\n", static_cast<unsigned long>(st.version),
              st.writer_alive ? "running" : "gone");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "train") == 0) {
    return Train(argc >= 4 ? std::atoi(argv[3]) : 2000);
  }
  if (argc >= 2 && std::strcmp(argv[1], "follow") == 0) {
    return Follow(argc >= 4 ? std::atoi(argv[3]) : 200);
  }
  std::fprintf(stderr, "usage: %s train [--steps N] | follow [--versions N]\n", argv[0]);
  return 2;
}
