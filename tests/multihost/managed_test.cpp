// A managed area (dsm_alloc_managed) across two hosts over memif. The writer
// changes every line of a float32 area at every version, as a training step
// changes every parameter, and its host sends a quarter of that within the
// budget. The other host reports the area as managed, with lines waiting
// while the writer writes; once the writer stops changing it (and keeps
// calling dsm_service, or frees the area), the replica becomes
// byte-identical to the writer (XXH3), and the wire carried far less than
// every change.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "dsm/dsm.h"
#include "tests/multihost/virtual_cluster.h"
#include "tests/support/child_process.h"

namespace dsm::testing {
namespace {

constexpr const char* kName = "mh/managed";
constexpr size_t kFloats = 256 * 1024;  // 1 MiB: 16,384 lines
constexpr size_t kBytes = kFloats * sizeof(float);
constexpr size_t kFloatsPerLine = 16;
constexpr uint64_t kVersions = 100;
constexpr auto kVersionGap = std::chrono::milliseconds(10);
// A quarter of what changes: every line, every 10 ms.
constexpr uint64_t kBudgetBytesPerS = kBytes / 4 * 100;
constexpr uint32_t kMaxLineAge = 8;

struct Board {
  std::atomic<bool> allocated{false};
  std::atomic<bool> writer_done{false};
  std::atomic<bool> reader_done{false};
  std::atomic<uint64_t> final_hash{0};
  std::atomic<uint64_t> writer_saw_residual{0};
  // The reader's host.
  std::atomic<int> reader_rc{-1};
  std::atomic<bool> reported_managed{false};
  std::atomic<uint64_t> reported_budget{0};
  std::atomic<uint32_t> reported_max_age{0};
  std::atomic<uint64_t> most_residual_seen{0};
  std::atomic<bool> converged{false};
  std::atomic<int64_t> converge_ms{-1};  // after the writer's last change
};

bool Init(const std::string& socket) {
  dsm_init_opts opts{};
  opts.socket_path = socket.c_str();
  return dsm_init(&opts) == DSM_OK;
}

int PublishRetrying(void* area) {
  int rc = DSM_OK;
  for (int i = 0; i < 2000 && (rc = dsm_publish(area)) == DSM_ERR_BUSY; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return rc;
}

// How the writer ends: it keeps calling dsm_service (the waiting lines go
// with versions that change nothing), or it frees the area at once
// (dsm_free sends what waits first).
enum class End { kKeepServicing, kFreeAtOnce };

int RunWriter(const std::string& socket, Board* b, End end) {
  if (!Init(socket)) return 10;
  dsm_managed_opts managed{};
  managed.budget_bytes_per_s = kBudgetBytesPerS;
  managed.max_line_age = kMaxLineAge;
  managed.element = DSM_ELEMENT_FLOAT32;
  // Three buffers, as the Fashion-MNIST example.
  dsm_alloc_opts opts{};
  opts.reader_buffers = 3;
  void* p = nullptr;
  if (dsm_alloc_managed(kName, kBytes, &opts, &managed, &p) != DSM_OK) return 11;
  auto* w = static_cast<float*>(p);
  for (size_t i = 0; i < kFloats; ++i) w[i] = 1.0f + static_cast<float>(i % 1000) / 1000.0f;
  dsm_log(w, kBytes);
  if (PublishRetrying(w) != DSM_OK) return 12;
  b->allocated = true;
  for (uint64_t v = 1; v <= kVersions; ++v) {
    // One float of every line moves, by 0.1% to 1.6% depending on the line.
    for (size_t line = 0; line < kFloats / kFloatsPerLine; ++line) {
      float& x = w[line * kFloatsPerLine + v % kFloatsPerLine];
      x *= 1.0f + 0.001f * static_cast<float>(1 + line % 16);
    }
    dsm_log(w, kBytes);
    if (PublishRetrying(w) != DSM_OK) return 13;
    dsm_managed_status st{};
    if (dsm_status_managed(w, &st) != DSM_OK || !st.managed) return 14;
    b->writer_saw_residual = std::max<uint64_t>(b->writer_saw_residual, st.residual_lines);
    std::this_thread::sleep_for(kVersionGap);
  }
  b->final_hash = XXH3_64bits(w, kBytes);
  if (end == End::kFreeAtOnce) {
    if (dsm_free(w) != DSM_OK) return 16;
    b->writer_done = true;
    return 0;
  }
  b->writer_done = true;
  // Still at quiescent points: the lines that wait go with versions that
  // change nothing.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!b->reader_done && std::chrono::steady_clock::now() < deadline) {
    if (const int rc = dsm_service(); rc != DSM_OK && rc != DSM_ERR_BUSY) return 15;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

int RunReader(const std::string& socket, Board* b) {
  if (!Init(socket)) return 20;
  const void* p = nullptr;
  size_t bytes = 0;
  if (dsm_attach(kName, 20000, &p, &bytes) != DSM_OK || bytes != kBytes) return 21;
  std::chrono::steady_clock::time_point done_at{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (std::chrono::steady_clock::now() < deadline) {
    dsm_service();  // moves to the newest version here
    dsm_managed_status st{};
    if (dsm_status_managed(p, &st) != DSM_OK) return 22;
    b->reported_managed = st.managed != 0;
    b->reported_budget = st.budget_bytes_per_s;
    b->reported_max_age = st.max_line_age;
    b->most_residual_seen = std::max<uint64_t>(b->most_residual_seen, st.residual_lines);
    if (b->writer_done) {
      if (done_at == std::chrono::steady_clock::time_point{}) {
        done_at = std::chrono::steady_clock::now();
      }
      if (XXH3_64bits(p, kBytes) == b->final_hash) {
        b->converged = true;
        b->converge_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - done_at)
                             .count();
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  b->reader_done = true;
  return 0;
}

void RunManaged(End end) {
  if (const std::string why = MultihostUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  VirtualCluster cluster(2, {}, "--device memif");
  ASSERT_TRUE(cluster.ok());
  Shared<Board> b;
  const pid_t writer = Spawn([&] { return RunWriter(cluster.socket(1), &*b, end); });
  ASSERT_TRUE(WaitFor([&] { return b->allocated.load(); }, 20000));
  const pid_t reader = Spawn([&] { return RunReader(cluster.socket(2), &*b); });
  EXPECT_EQ(Reap(reader, 90000), 0);
  EXPECT_EQ(Reap(writer, 60000), 0);

  EXPECT_TRUE(b->reported_managed) << "the replica's host knows the area is managed";
  EXPECT_EQ(b->reported_budget.load(), kBudgetBytesPerS);
  EXPECT_EQ(b->reported_max_age.load(), kMaxLineAge);
  EXPECT_GT(b->writer_saw_residual.load(), 0u) << "the budget held lines back";
  EXPECT_GT(b->most_residual_seen.load(), 0u) << "the replica's host heard of the waiting lines";
  EXPECT_TRUE(b->converged) << "the replica never became byte-identical to the writer";
  std::printf(
      "converged %lld ms after the last change; most lines waiting %llu (writer's host), "
      "%llu (as heard on the replica's host)\n",
      static_cast<long long>(b->converge_ms.load()),
      static_cast<unsigned long long>(b->writer_saw_residual.load()),
      static_cast<unsigned long long>(b->most_residual_seen.load()));

  const auto c1 = cluster.Dsmctl(1);
  ASSERT_FALSE(c1.is_discarded());
  const auto& counters = c1["counters"];
  std::printf("host 1: %s\n", counters.dump().c_str());
  EXPECT_GT(counters["managed_lines_deferred"].get<uint64_t>(), 0u);
  // Every line changed at every version: the wire carried a fraction of it.
  const uint64_t changed = kVersions * kBytes;
  const uint64_t sent = counters["changed_bytes_out"].get<uint64_t>();
  std::printf("line bytes sent %llu of %llu changed (%.2f)\n",
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(changed),
              static_cast<double>(sent) / static_cast<double>(changed));
  EXPECT_LT(sent, changed / 2);
  const auto c2 = cluster.Dsmctl(2);
  ASSERT_FALSE(c2.is_discarded());
  EXPECT_GT(c2["counters"]["versions_received"].get<uint64_t>(), 0u);
  if (end == End::kKeepServicing) {
    const auto area = VirtualCluster::FindArea(c1, kName, false);
    ASSERT_FALSE(area.is_null());
    EXPECT_TRUE(area["managed"].get<bool>());
  }
}

TEST(Managed, ReplicaLagsWithinTheBudgetThenConvergesByteForByte) {
  RunManaged(End::kKeepServicing);
}

// dsm_free right after the last change: what still waits goes first, so the
// replica's last version is the writer's last content, byte for byte.
TEST(Managed, FreeingTheAreaSendsWhatWaitsFirst) { RunManaged(End::kFreeAtOnce); }

}  // namespace
}  // namespace dsm::testing
