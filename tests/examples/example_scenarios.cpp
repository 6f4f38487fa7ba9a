#include "tests/examples/example_scenarios.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace dsm::testing {

namespace {

// Every run of a test is bounded; these are far above what they take (seconds).
constexpr int kRunTimeoutS = 90;

// A few hundred SGD steps per worker: 90k training ratings, 4 epochs, batch 256.
constexpr const char* kMfArgs =
    "--users 2000 --items 2000 --ratings 100000 --epochs 4 --batch 256 --quiet";
// The W-worker run may end at most this much above the 1-worker run's test RMSE
// (measured: within 0.01 at these settings; staleness makes it vary a little).
constexpr double kMfRmseTolerance = 0.05;
constexpr int kBarrierRounds = 300;
constexpr int kHashKeys = 20000;

std::vector<double> TestRmse(const nlohmann::json& j) {
  std::vector<double> v;
  if (j.is_discarded() || !j.contains("epochs")) return v;
  for (const auto& e : j["epochs"]) v.push_back(e["test_rmse"].get<double>());
  return v;
}

std::vector<int> Ranks(const ExampleRunner& runner, int n, const HostOf& host_of,
                       const std::function<std::string(int)>& command, const std::string& tag) {
  std::vector<ExampleRun> runs;
  for (int k = 0; k < n; ++k) {
    runs.push_back({command(k), runner.path(tag + std::to_string(k) + ".log"), host_of(k)});
  }
  return runner.RunTogether(runs, kRunTimeoutS);
}

}  // namespace

void ExpectMatrixFactorizationMatchesOneWorker(const ExampleRunner& runner, int workers,
                                               const HostOf& host_of) {
  const std::string bin = ExampleBinary("DSM_EXAMPLE_MF");
  ASSERT_FALSE(bin.empty()) << "DSM_EXAMPLE_MF is not set (meson sets it)";
  auto mf = [&](int w, const std::string& tag) {
    return [&, w, tag](int k) {
      return bin + " " + kMfArgs + " --workers " + std::to_string(w) + " --rank " + std::to_string(k) +
             " --prefix " + tag + " --json " + runner.path(tag + std::to_string(k) + ".json");
    };
  };
  for (int code : Ranks(runner, 1, host_of, mf(1, "mf1-"), "mf1-")) ASSERT_EQ(code, 0);
  for (int code : Ranks(runner, workers, host_of, mf(workers, "mfw-"), "mfw-")) ASSERT_EQ(code, 0);

  const nlohmann::json one = runner.ReadJson("mf1-0.json");
  const std::vector<double> rmse1 = TestRmse(one);
  ASSERT_EQ(rmse1.size(), 4u);
  EXPECT_LT(rmse1.back(), 0.85 * rmse1.front()) << "the 1-worker test RMSE goes down";
  EXPECT_GT(one["logged"]["rows_per_version"].get<double>(), 0);
  for (int k = 0; k < workers; ++k) {
    SCOPED_TRACE("worker " + std::to_string(k) + " of " + std::to_string(workers));
    const nlohmann::json j = runner.ReadJson("mfw-" + std::to_string(k) + ".json");
    const std::vector<double> rmse = TestRmse(j);
    ASSERT_EQ(rmse.size(), 4u);
    for (size_t e = 1; e < rmse.size(); ++e) EXPECT_LT(rmse[e], rmse[e - 1]) << "epoch " << e + 1;
    EXPECT_LT(rmse.back(), rmse1.back() + kMfRmseTolerance);
    // Sparse updates: a version carries a small part of the area, own rows and pushes.
    EXPECT_LT(j["logged"]["area_fraction_per_version"].get<double>(), 0.25);
    EXPECT_GT(j["epochs"][0]["push_rows_per_version"].get<double>(), 0);
    EXPECT_GT(j["epochs"][0]["folded_rows_per_version"].get<double>(), 0);
    EXPECT_LE(j["epochs"][0]["staleness_max"].get<int>(), 3);
    std::printf("worker %d/%d: test RMSE per epoch", k, workers);
    for (double r : rmse) std::printf(" %.4f", r);
    std::printf(" (1 worker: %.4f), %.0f versions/s, %.0f lines per version\n", rmse1.back(),
                j["versions_per_s"].get<double>(), j["logged"]["lines_per_version"].get<double>());
  }
}

void ExpectBarrierCompletes(const ExampleRunner& runner, int workers, const HostOf& host_of) {
  const std::string bin = ExampleBinary("DSM_EXAMPLE_BARRIER");
  ASSERT_FALSE(bin.empty()) << "DSM_EXAMPLE_BARRIER is not set (meson sets it)";
  const auto codes = Ranks(runner, workers, host_of, [&](int k) {
    return bin + " --workers " + std::to_string(workers) + " --rank " + std::to_string(k) +
           " --rounds " + std::to_string(kBarrierRounds) + " --json " +
           runner.path("barrier" + std::to_string(k) + ".json");
  }, "barrier");
  for (int k = 0; k < workers; ++k) {
    SCOPED_TRACE("process " + std::to_string(k));
    EXPECT_EQ(codes[static_cast<size_t>(k)], 0);
    const nlohmann::json j = runner.ReadJson("barrier" + std::to_string(k) + ".json");
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["rounds_done"].get<int>(), kBarrierRounds);
    EXPECT_EQ(j["violations"].get<int>(), 0);
    ASSERT_EQ(j["last_seen_rounds"].size(), static_cast<size_t>(workers - 1));
    for (const auto& seen : j["last_seen_rounds"]) EXPECT_GE(seen.get<int>(), kBarrierRounds);
    std::printf("process %d/%d: round p50 %.0f us, p99 %.0f us\n", k, workers,
                j["round_p50_us"].get<double>(), j["round_p99_us"].get<double>());
  }
}

void ExpectHashTableFoundByReaders(const ExampleRunner& runner, int readers, const HostOf& host_of) {
  const std::string bin = ExampleBinary("DSM_EXAMPLE_HASHTABLE");
  ASSERT_FALSE(bin.empty()) << "DSM_EXAMPLE_HASHTABLE is not set (meson sets it)";
  const std::string keys = " --keys " + std::to_string(kHashKeys);
  const auto codes = Ranks(runner, readers + 1, host_of, [&](int k) {
    return k == 0 ? bin + " build" + keys + " --readers " + std::to_string(readers) + " --json " +
                        runner.path("hashtable.json")
                  : bin + " lookup" + keys + " --reader " + std::to_string(k - 1);
  }, "hashtable");
  for (int code : codes) EXPECT_EQ(code, 0);
  const nlohmann::json j = runner.ReadJson("hashtable.json");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_EQ(j["readers"].size(), static_cast<size_t>(readers));
  for (const auto& r : j["readers"]) {
    EXPECT_EQ(r["found"].get<int>(), kHashKeys);
    EXPECT_EQ(r["wrong"].get<int>(), 0);
    EXPECT_EQ(r["missing"].get<int>(), 0);
    EXPECT_EQ(r["walked"].get<int>(), kHashKeys);
    EXPECT_EQ(r["bad_pointers"].get<int>(), 0);
  }
}

}  // namespace dsm::testing
