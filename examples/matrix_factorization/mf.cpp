// Matrix factorization by SGD on libdsm: a sparse, skewed workload.
//
// W workers (one process per host, or several on one host) factorize one
// synthetic ratings matrix (ratings.h: low-rank truth + noise, Zipf item
// popularity), every worker generating the same data from the seed.
//
//   - Users are partitioned (user u belongs to worker u mod W) with their ratings;
//     user factors are private to their worker.
//   - Item factors are sharded: worker k is the single writer of the area
//     "<prefix>/shard/<k>" (shard_area.h), which holds the factors of its items,
//     and it attaches the other workers' shards by name.
//   - A rating of an item another worker owns updates the user factor here and
//     adds the item's update to this worker's push row for it (in its own area);
//     the owner folds every worker's pushes into its shard at each step. Until the
//     owner's shard shows a push folded, the pusher adds it to what it reads of
//     the item (read-your-writes): without that, a hot item's pushes from several
//     stale steps pile up unseen and SGD diverges.
//   - Each step processes a slice of the worker's ratings, logs only the rows it
//     touched (dsm_log per row), publishes one version and applies the staleness
//     bound (SSP): before the next step, every other worker's version must be at
//     least own version - S (dsm_wait_version).
//   - At the end of an epoch three barriers make the evaluation exact: everyone
//     finished the epoch, everyone folded every push, everyone published its
//     users' error sums (in its area's header); each worker then prints the
//     global train/test RMSE.
//
//   mf --epochs 10 --workers 3 --rank 0 --json out.json
//
// The same binary with --workers 1 is the single-host baseline. See README.md.
#include <dsm/dsm.hpp>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ratings.h"
#include "sgd.h"
#include "shard_area.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// How long a finished worker waits for the others' done marks before leaving anyway.
constexpr double kLeaveTimeoutS = 10;
// Items counted as "hot" in the report: the most popular 1%.
constexpr double kHotItemFraction = 0.01;
// Standard deviation of the initial factors.
constexpr float kInitScale = 0.1f;

struct Options {
  mf::RatingsConfig data;
  uint32_t factors = 16;
  int epochs = 10;
  size_t batch = 256;  // ratings per step (one version per step)
  float lr = 0.05f;
  float reg = 0.02f;
  int workers = 1;
  int rank = 0;
  int staleness = 3;
  size_t steps_per_epoch = 0;  // 0: as many as it takes to cover the ratings with --batch
  std::string prefix = "mf";
  std::string json;
  double wait_timeout_s = 60;
  double attach_timeout_s = 60;
  uint32_t reader_buffers = 3;
  bool quiet = false;
};

// What this worker logged in one version, by kind of row.
struct LogCounts {
  uint64_t shard_rows = 0;   // own items updated by own ratings
  uint64_t push_rows = 0;    // other workers' items
  uint64_t folded_rows = 0;  // own items updated by others' pushes
  uint64_t hot_rows = 0;     // of all the above, rows of the hottest 1% items
  uint64_t lines = 0;        // distinct 64-byte lines, header included
};

struct EpochRecord {
  int epoch = 0;
  double train_rmse = 0, test_rmse = 0;  // global, from every worker's sums
  double online_rmse = 0;                // this worker, errors before each update
  double wall_s = 0, epoch_s = 0;
  uint64_t steps = 0, versions = 0;
  double versions_per_s = 0;
  double staleness_mean = 0;
  int staleness_max = 0;
  LogCounts logged;  // summed over the epoch's versions
  double compute_s = 0, fold_s = 0, publish_s = 0, wait_s = 0, eval_s = 0;
};

class Worker {
 public:
  explicit Worker(const Options& o)
      : o_(o), layout_(o.data.items, o.workers, o.factors), k_(o.factors) {}
  int Run();

 private:
  bool SetUp();
  // Marks a row (or the header line) as written: logs it and counts its lines once per version.
  void LogRow(float* row, uint64_t* kind_count, uint32_t item);
  void LogHeaderLine(const void* field);
  // Adds every other worker's new pushes for this worker's items to its shard.
  void Fold();
  // Publishes one version (retrying while local readers hold every buffer).
  bool Publish();
  // Waits until every other worker's version is >= v (timeout_s < 0: --wait-timeout).
  bool WaitOthers(uint64_t v, const char* why, double timeout_s = -1, bool fatal = true);
  // The factors of `item` as this worker sees them: its own rows, or the owner's
  // plus the pushes the owner has not folded yet (written to `scratch`).
  const float* ItemView(uint32_t item, float* scratch) const;
  // Adds `delta` to this worker's push row for `item` (owned by `owner`).
  void Push(int owner, uint32_t item, const float* delta);
  // Forgets the pushes every owner's shard (as seen now) says it has folded.
  void ConfirmPushes();
  float* UserRow(uint32_t user) { return &users_[(user / static_cast<uint32_t>(o_.workers)) * k_]; }
  mf::EpochStats Evaluate();
  void Print(const EpochRecord& e) const;
  bool WriteJson(const std::vector<EpochRecord>& epochs, double total_s) const;

  Options o_;
  mf::ShardLayout layout_;
  size_t k_;
  mf::Ratings data_;
  std::vector<mf::Rating> train_, test_;  // this worker's users' ratings
  std::vector<float> users_;              // this worker's users' factors, k_ per user
  std::vector<uint8_t> hot_;              // per item
  size_t steps_per_epoch_ = 0;

  void* own_ = nullptr;  // this worker's area (writer)
  std::vector<const void*> others_;  // by worker; null at own rank
  // Per other worker: its push rows for our items as last folded.
  std::vector<std::vector<float>> folded_;
  // Pushes not yet folded into the shard as this worker sees it, per owner, by
  // the own version that carried them; and their sum per item (items x k_).
  struct PushBatch {
    uint64_t version;
    std::vector<uint32_t> items;
    std::vector<float> deltas;  // k_ per item
  };
  std::vector<std::deque<PushBatch>> unfolded_;
  std::vector<float> unfolded_sum_;
  uint64_t version_ = 0;  // own versions published
  // Row -> the version it was last counted in; rows are the shard's, then the push rows.
  std::vector<uint64_t> row_stamp_;
  LogCounts building_;  // what the version being built logged so far
  uint64_t publish_retries_ = 0;
};

int Fail(const char* what, const dsm::Status& st) {
  std::fprintf(stderr, "mf: %s: %s\n", what, st.ToString().c_str());
  return 1;
}

bool Worker::SetUp() {
  data_ = mf::Generate(o_.data);
  const auto mine = [&](const mf::Rating& r) {
    return r.user % static_cast<uint32_t>(o_.workers) == static_cast<uint32_t>(o_.rank);
  };
  std::copy_if(data_.train.begin(), data_.train.end(), std::back_inserter(train_), mine);
  std::copy_if(data_.test.begin(), data_.test.end(), std::back_inserter(test_), mine);
  // SSP counts steps, so every worker takes the same number: enough for the
  // largest partition, each step taking an equal slice of this worker's ratings.
  std::vector<size_t> per_worker(static_cast<size_t>(o_.workers), 0);
  for (const mf::Rating& r : data_.train) ++per_worker[r.user % static_cast<uint32_t>(o_.workers)];
  const size_t largest = *std::max_element(per_worker.begin(), per_worker.end());
  steps_per_epoch_ = (largest + o_.batch - 1) / o_.batch;
  if (o_.steps_per_epoch != 0) steps_per_epoch_ = std::min(steps_per_epoch_, o_.steps_per_epoch);
  if (train_.empty() || steps_per_epoch_ == 0) {
    std::fprintf(stderr, "mf: worker %d has no ratings: use more --ratings or fewer --workers\n", o_.rank);
    return false;
  }

  // The hottest items by their number of ratings, to see how much of the log they make.
  std::vector<uint32_t> order(o_.data.items);
  std::iota(order.begin(), order.end(), 0u);
  const size_t n_hot = std::max<size_t>(1, static_cast<size_t>(kHotItemFraction * o_.data.items));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_hot), order.end(),
                    [&](uint32_t a, uint32_t b) { return data_.item_count[a] > data_.item_count[b]; });
  hot_.assign(o_.data.items, 0);
  for (size_t i = 0; i < n_hot; ++i) hot_[order[i]] = 1;

  const uint32_t n_users = (o_.data.users + static_cast<uint32_t>(o_.workers) - 1) / static_cast<uint32_t>(o_.workers);
  users_.assign(size_t{n_users} * k_, 0.f);
  for (uint32_t u = static_cast<uint32_t>(o_.rank); u < o_.data.users; u += static_cast<uint32_t>(o_.workers)) {
    mf::InitRow(o_.data.seed, u, kInitScale, k_, UserRow(u));
  }

  // The area. Its writer copy is not promised to be zero: everything is written here.
  const std::string name = o_.prefix + "/shard/" + std::to_string(o_.rank);
  dsm_alloc_opts opts{};
  opts.reader_buffers = o_.reader_buffers;
  const size_t bytes = layout_.bytes(o_.rank);
  if (const int rc = dsm_alloc(name.c_str(), bytes, &opts, &own_); rc != DSM_OK) {
    std::fprintf(stderr, "mf: cannot allocate '%s' (%zu bytes): %s: %s%s\n", name.c_str(), bytes,
                 dsm_strerror(rc), dsm_last_error(),
                 rc == DSM_ERR_EXISTS ? " (another run still holds it: use another --prefix)" : "");
    return false;
  }
  std::memset(own_, 0, bytes);
  for (uint32_t i = layout_.lo(o_.rank); i < layout_.hi(o_.rank); ++i) {
    mf::InitRow(o_.data.seed + 1, i, kInitScale, k_, layout_.shard_row(static_cast<float*>(own_), o_.rank, i));
  }
  dsm_log(own_, bytes);
  row_stamp_.assign(layout_.hi(o_.rank) - layout_.lo(o_.rank) + layout_.push_rows(), 0);

  others_.assign(static_cast<size_t>(o_.workers), nullptr);
  folded_.resize(static_cast<size_t>(o_.workers));
  const size_t shard_floats = (layout_.hi(o_.rank) - layout_.lo(o_.rank)) * layout_.row_floats();
  for (int j = 0; j < o_.workers; ++j) {
    if (j == o_.rank) continue;
    const std::string other = o_.prefix + "/shard/" + std::to_string(j);
    size_t size = 0;
    const int rc = dsm_attach(other.c_str(), static_cast<uint32_t>(o_.attach_timeout_s * 1000),
                              &others_[static_cast<size_t>(j)], &size);
    if (rc != DSM_OK) {
      std::fprintf(stderr, "mf: worker %d: cannot attach '%s' within %.0f s: %s: %s (is worker %d "
                           "running, with the same --prefix?)\n",
                   o_.rank, other.c_str(), o_.attach_timeout_s, dsm_strerror(rc), dsm_last_error(), j);
      return false;
    }
    if (size < layout_.bytes(j)) {
      std::fprintf(stderr, "mf: '%s' holds %zu bytes, expected %zu: the workers run with "
                           "different data or --factors\n", other.c_str(), size, layout_.bytes(j));
      return false;
    }
    folded_[static_cast<size_t>(j)].assign(shard_floats, 0.f);
  }
  unfolded_.resize(static_cast<size_t>(o_.workers));
  if (o_.workers > 1) unfolded_sum_.assign(size_t{o_.data.items} * k_, 0.f);
  return true;
}

void Worker::LogRow(float* row, uint64_t* kind_count, uint32_t item) {
  dsm_log(row, layout_.row_bytes());
  const size_t slot = row >= layout_.push_row(static_cast<float*>(own_), o_.rank, 0)
                          ? (layout_.hi(o_.rank) - layout_.lo(o_.rank)) + item
                          : item - layout_.lo(o_.rank);
  if (row_stamp_[slot] == version_ + 1) return;  // already counted in this version
  row_stamp_[slot] = version_ + 1;
  ++*kind_count;
  building_.hot_rows += hot_[item];
  building_.lines += layout_.row_bytes() / mf::kLineBytes;
}

void Worker::LogHeaderLine(const void* field) {
  dsm_log(field, sizeof(uint64_t));
  ++building_.lines;
}

const float* Worker::ItemView(uint32_t item, float* scratch) const {
  const int w = layout_.owner(item);
  if (w == o_.rank) return layout_.shard_row(static_cast<const float*>(own_), w, item);
  const float* q = layout_.shard_row(static_cast<const float*>(others_[static_cast<size_t>(w)]), w, item);
  const float* mine = &unfolded_sum_[size_t{item} * k_];
  for (size_t d = 0; d < k_; ++d) scratch[d] = q[d] + mine[d];
  return scratch;
}

void Worker::Push(int owner, uint32_t item, const float* delta) {
  float* row = layout_.push_row(static_cast<float*>(own_), o_.rank, item);
  float* sum = &unfolded_sum_[size_t{item} * k_];
  for (size_t d = 0; d < k_; ++d) {
    row[d] += delta[d];
    sum[d] += delta[d];
  }
  LogRow(row, &building_.push_rows, item);
  std::deque<PushBatch>& q = unfolded_[static_cast<size_t>(owner)];
  if (q.empty() || q.back().version != version_ + 1) q.push_back(PushBatch{version_ + 1, {}, {}});
  q.back().items.push_back(item);
  q.back().deltas.insert(q.back().deltas.end(), delta, delta + k_);
}

void Worker::ConfirmPushes() {
  for (int w = 0; w < o_.workers; ++w) {
    std::deque<PushBatch>& q = unfolded_[static_cast<size_t>(w)];
    if (q.empty()) continue;
    const uint64_t folded =
        mf::ShardLayout::header(others_[static_cast<size_t>(w)])->folded_version[o_.rank];
    while (!q.empty() && q.front().version <= folded) {
      const PushBatch& b = q.front();
      for (size_t n = 0; n < b.items.size(); ++n) {
        float* sum = &unfolded_sum_[size_t{b.items[n]} * k_];
        for (size_t d = 0; d < k_; ++d) sum[d] -= b.deltas[n * k_ + d];
      }
      q.pop_front();
    }
    // Nothing left in flight: clear the rounding the subtractions left behind.
    if (q.empty()) {
      std::fill(unfolded_sum_.begin() + static_cast<std::ptrdiff_t>(size_t{layout_.lo(w)} * k_),
                unfolded_sum_.begin() + static_cast<std::ptrdiff_t>(size_t{layout_.hi(w)} * k_), 0.f);
    }
  }
}

void Worker::Fold() {
  const uint32_t lo = layout_.lo(o_.rank), hi = layout_.hi(o_.rank);
  const size_t stride = layout_.row_floats();
  for (int j = 0; j < o_.workers; ++j) {
    if (j == o_.rank) continue;
    const float* base = static_cast<const float*>(others_[static_cast<size_t>(j)]);
    const uint64_t version = dsm_version(base);
    if (version == mf::ShardLayout::header(own_)->folded_version[j]) continue;
    mf::ShardLayout::header(own_)->folded_version[j] = version;
    LogHeaderLine(&mf::ShardLayout::header(own_)->folded_version[j]);
    float* seen = folded_[static_cast<size_t>(j)].data();
    for (uint32_t i = lo; i < hi; ++i, seen += stride) {
      const float* pushed = layout_.push_row(base, j, i);
      if (std::memcmp(pushed, seen, k_ * sizeof(float)) == 0) continue;
      float* q = layout_.shard_row(static_cast<float*>(own_), o_.rank, i);
      for (size_t d = 0; d < k_; ++d) {
        q[d] += pushed[d] - seen[d];
        seen[d] = pushed[d];
      }
      LogRow(q, &building_.folded_rows, i);
    }
  }
}

bool Worker::Publish() {
  const auto deadline = Clock::now() + std::chrono::duration<double>(o_.wait_timeout_s);
  for (;;) {
    const int rc = dsm_publish(own_);
    if (rc == DSM_OK) break;
    if (rc != DSM_ERR_BUSY || Clock::now() > deadline) {
      std::fprintf(stderr, "mf: worker %d: publishing version %" PRIu64 " failed: %s: %s\n", o_.rank,
                   version_ + 1, dsm_strerror(rc), dsm_last_error());
      return false;
    }
    ++publish_retries_;  // local readers hold every spare buffer; they move on at their next sync
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ++version_;
  if (dsm_version(own_) != version_) {
    std::fprintf(stderr, "mf: worker %d: area at version %" PRIu64 ", expected %" PRIu64
                 " (every publish must carry a change)\n", o_.rank, dsm_version(own_), version_);
    return false;
  }
  return true;
}

bool Worker::WaitOthers(uint64_t v, const char* why, double timeout_s, bool fatal) {
  if (timeout_s < 0) timeout_s = o_.wait_timeout_s;
  for (int j = 0; j < o_.workers; ++j) {
    const void* area = others_[static_cast<size_t>(j)];
    if (j == o_.rank || dsm_version(area) >= v) continue;
    const int rc = dsm_wait_version(area, v, static_cast<uint32_t>(timeout_s * 1000));
    if (rc != DSM_OK) {
      dsm_area_status st{};
      dsm_status(area, &st);
      std::fprintf(stderr, "mf: %sworker %d: %s: worker %d is at version %" PRIu64 " (latest here %"
                   PRIu64 "), needed %" PRIu64 " within %.0f s; its writer is %s: %s\n",
                   fatal ? "" : "warning: ", o_.rank, why, j, dsm_version(area), st.latest_version, v,
                   timeout_s, st.writer_alive ? "reported alive" : "gone", dsm_strerror(rc));
      return false;
    }
  }
  return true;
}

mf::EpochStats Worker::Evaluate() {
  mf::EpochStats s{};
  std::vector<float> scratch(k_);
  for (const mf::Rating& r : train_) {
    const float e = r.value - mf::Predict(UserRow(r.user), ItemView(r.item, scratch.data()), k_);
    s.train_sse += double{e} * e;
  }
  for (const mf::Rating& r : test_) {
    const float e = r.value - mf::Predict(UserRow(r.user), ItemView(r.item, scratch.data()), k_);
    s.test_sse += double{e} * e;
  }
  s.train_n = train_.size();
  s.test_n = test_.size();
  return s;
}

void Worker::Print(const EpochRecord& e) const {
  const double v = static_cast<double>(std::max<uint64_t>(1, e.versions));
  const double busy = e.compute_s + e.fold_s + e.publish_s + e.wait_s + e.eval_s;
  auto pct = [&](double x) { return busy > 0 ? 100.0 * x / busy : 0.0; };
  std::printf("[worker %d/%d] epoch %d/%d  train_rmse %.4f  test_rmse %.4f  wall %.2f s (epoch %.2f s)"
              "  versions/s %.0f  staleness mean %.2f max %d  logged/version: %.0f lines (%.1f KiB; "
              "rows: %.0f own, %.0f push, %.0f folded; %.0f%% hot)  time: compute %.0f%% fold %.0f%% "
              "publish %.0f%% wait %.0f%% eval %.0f%%\n",
              o_.rank, o_.workers, e.epoch, o_.epochs, e.train_rmse, e.test_rmse, e.wall_s, e.epoch_s,
              e.versions_per_s, e.staleness_mean, e.staleness_max,
              static_cast<double>(e.logged.lines) / v,
              static_cast<double>(e.logged.lines * mf::kLineBytes) / v / 1024,
              static_cast<double>(e.logged.shard_rows) / v, static_cast<double>(e.logged.push_rows) / v,
              static_cast<double>(e.logged.folded_rows) / v,
              100.0 * static_cast<double>(e.logged.hot_rows) /
                  static_cast<double>(std::max<uint64_t>(1, e.logged.shard_rows + e.logged.push_rows +
                                                                e.logged.folded_rows)),
              pct(e.compute_s), pct(e.fold_s), pct(e.publish_s), pct(e.wait_s), pct(e.eval_s));
  std::fflush(stdout);
}

int Worker::Run() {
  dsm::Session session;
  if (!session) return Fail("cannot connect to dsmd", session.status());
  if (!SetUp()) return 1;
  mf::ShardHeader* header = mf::ShardLayout::header(own_);
  if (!o_.quiet) {
    std::printf("[worker %d/%d] %u users x %u items, %zu/%zu train/test ratings here (of %zu/%zu), "
                "items %u..%u, %zu steps/epoch, factors %u, lr %g, reg %g, staleness bound %d, area "
                "%.1f KiB (%zu lines), noise floor %.4f\n",
                o_.rank, o_.workers, o_.data.users, o_.data.items, train_.size(), test_.size(),
                data_.train.size(), data_.test.size(), layout_.lo(o_.rank), layout_.hi(o_.rank) - 1,
                steps_per_epoch_, o_.factors, static_cast<double>(o_.lr), static_cast<double>(o_.reg),
                o_.staleness, static_cast<double>(layout_.bytes(o_.rank)) / 1024,
                layout_.bytes(o_.rank) / mf::kLineBytes, data_.oracle_test_rmse);
    std::fflush(stdout);
  }
  // Version 1: the initial shard. Nobody reads a shard before it exists.
  if (!Publish() || !WaitOthers(1, "start")) return 1;
  building_ = {};

  std::vector<EpochRecord> epochs;
  std::vector<float> view(k_), delta(k_);
  std::mt19937_64 shuffle_rng(o_.data.seed * 1000003ULL + static_cast<uint64_t>(o_.rank));
  const auto start = Clock::now();
  for (int epoch = 1; epoch <= o_.epochs; ++epoch) {
    EpochRecord e;
    e.epoch = epoch;
    const auto epoch_start = Clock::now();
    const uint64_t version_start = version_;
    std::shuffle(train_.begin(), train_.end(), shuffle_rng);
    double online_sse = 0, staleness_sum = 0;
    size_t staleness_count = 0, seen = 0;
    auto end_version = [&] {  // the version just published: add what it logged
      e.logged.shard_rows += building_.shard_rows;
      e.logged.push_rows += building_.push_rows;
      e.logged.folded_rows += building_.folded_rows;
      e.logged.hot_rows += building_.hot_rows;
      e.logged.lines += building_.lines;
      building_ = {};
    };
    for (size_t s = 0; s < steps_per_epoch_; ++s) {
      const auto t0 = Clock::now();
      int64_t step_stale = 0;
      for (int j = 0; j < o_.workers; ++j) {
        if (j == o_.rank) continue;
        const int64_t d = std::max<int64_t>(
            0, static_cast<int64_t>(version_) - static_cast<int64_t>(dsm_version(others_[static_cast<size_t>(j)])));
        step_stale = std::max(step_stale, d);
        staleness_sum += static_cast<double>(d);
        ++staleness_count;
      }
      e.staleness_max = std::max(e.staleness_max, static_cast<int>(step_stale));
      const size_t first = train_.size() * s / steps_per_epoch_;
      const size_t last = train_.size() * (s + 1) / steps_per_epoch_;
      for (size_t n = first; n < last; ++n) {
        const mf::Rating& r = train_[n];
        const int owner = layout_.owner(r.item);
        float* p = UserRow(r.user);
        float e_r;
        if (owner == o_.rank) {
          float* q = layout_.shard_row(static_cast<float*>(own_), o_.rank, r.item);
          e_r = mf::SgdStep(p, q, r.value, o_.lr, o_.reg, k_, q);
          LogRow(q, &building_.shard_rows, r.item);
        } else {
          std::fill(delta.begin(), delta.end(), 0.f);
          e_r = mf::SgdStep(p, ItemView(r.item, view.data()), r.value, o_.lr, o_.reg, k_, delta.data());
          Push(owner, r.item, delta.data());
        }
        online_sse += double{e_r} * e_r;
      }
      seen += last - first;
      const auto t1 = Clock::now();
      Fold();
      const auto t2 = Clock::now();
      header->step += 1;
      LogHeaderLine(&header->step);
      if (!Publish()) return 1;
      end_version();
      session.service();  // move the replicas of the other shards to their newest versions
      const auto t3 = Clock::now();
      if (version_ > static_cast<uint64_t>(o_.staleness) &&
          !WaitOthers(version_ - static_cast<uint64_t>(o_.staleness), "staleness bound")) {
        return 1;
      }
      ConfirmPushes();
      const auto t4 = Clock::now();
      e.compute_s += Seconds(t0, t1);
      e.fold_s += Seconds(t1, t2);
      e.publish_s += Seconds(t2, t3);
      e.wait_s += Seconds(t3, t4);
    }
    e.steps = steps_per_epoch_;
    e.online_rmse = std::sqrt(online_sse / static_cast<double>(std::max<size_t>(1, seen)));
    e.staleness_mean = staleness_count ? staleness_sum / static_cast<double>(staleness_count) : 0;

    // Epoch end: everyone's last pushes, then everyone's folds, then everyone's sums.
    const auto t0 = Clock::now();
    if (!WaitOthers(version_, "end of epoch (all steps done)")) return 1;
    const auto t1 = Clock::now();
    Fold();
    header->phase += 1;
    LogHeaderLine(&header->phase);
    if (!Publish()) return 1;
    end_version();
    const auto t2 = Clock::now();
    if (!WaitOthers(version_, "end of epoch (all pushes folded)")) return 1;
    ConfirmPushes();  // every push is folded now: the views are the owners' shards
    const auto t3 = Clock::now();
    if (epoch <= mf::kMaxEpochs) {
      header->epochs[epoch - 1] = Evaluate();
      dsm_log(&header->epochs[epoch - 1], sizeof(mf::EpochStats));
    }
    header->epochs_done = static_cast<uint64_t>(epoch);
    LogHeaderLine(&header->epochs_done);
    if (!Publish()) return 1;
    end_version();
    const auto t4 = Clock::now();
    if (!WaitOthers(version_, "end of epoch (every worker's error sums)")) return 1;
    const auto t5 = Clock::now();
    double train_sse = 0, test_sse = 0;
    uint64_t train_n = 0, test_n = 0;
    for (int j = 0; j < o_.workers; ++j) {
      const mf::EpochStats& st =
          mf::ShardLayout::header(j == o_.rank ? own_ : others_[static_cast<size_t>(j)])->epochs[epoch - 1];
      train_sse += st.train_sse;
      test_sse += st.test_sse;
      train_n += st.train_n;
      test_n += st.test_n;
    }
    e.train_rmse = std::sqrt(train_sse / static_cast<double>(std::max<uint64_t>(1, train_n)));
    e.test_rmse = std::sqrt(test_sse / static_cast<double>(std::max<uint64_t>(1, test_n)));
    e.fold_s += Seconds(t1, t2);
    e.wait_s += Seconds(t0, t1) + Seconds(t2, t3) + Seconds(t4, t5);
    e.eval_s += Seconds(t3, t4);
    const auto end = Clock::now();
    e.versions = version_ - version_start;
    e.epoch_s = Seconds(epoch_start, end);
    e.wall_s = Seconds(start, end);
    e.versions_per_s = static_cast<double>(e.versions) / e.epoch_s;
    epochs.push_back(e);
    Print(e);
  }
  const double total_s = Seconds(start, Clock::now());
  if (!o_.json.empty() && !WriteJson(epochs, total_s)) return 1;
  // A done mark; stay until every other worker has ours (its last wait needs our sums).
  header->phase += 1;
  LogHeaderLine(&header->phase);
  if (!Publish()) return 1;
  WaitOthers(version_, "leaving (other workers' done marks)", std::min(o_.wait_timeout_s, kLeaveTimeoutS),
             /*fatal=*/false);
  return 0;
}

bool Worker::WriteJson(const std::vector<EpochRecord>& epochs, double total_s) const {
  using nlohmann::json;
  json j;
  j["example"] = "matrix_factorization";
  j["config"] = {{"users", o_.data.users},
                 {"items", o_.data.items},
                 {"ratings", o_.data.ratings},
                 {"true_rank", o_.data.true_rank},
                 {"zipf_s", o_.data.zipf_s},
                 {"noise", o_.data.noise},
                 {"test_fraction", o_.data.test_fraction},
                 {"seed", o_.data.seed},
                 {"factors", o_.factors},
                 {"epochs", o_.epochs},
                 {"batch", o_.batch},
                 {"lr", std::round(static_cast<double>(o_.lr) * 1e6) / 1e6},
                 {"reg", std::round(static_cast<double>(o_.reg) * 1e6) / 1e6},
                 {"workers", o_.workers},
                 {"rank", o_.rank},
                 {"staleness_bound", o_.staleness},
                 {"steps_per_epoch", steps_per_epoch_}};
  j["data"] = {{"train_ratings", data_.train.size()},
               {"test_ratings", data_.test.size()},
               {"worker_train_ratings", train_.size()},
               {"worker_test_ratings", test_.size()},
               {"oracle_test_rmse", data_.oracle_test_rmse}};
  j["area"] = {{"bytes", layout_.bytes(o_.rank)},
               {"lines", layout_.bytes(o_.rank) / mf::kLineBytes},
               {"row_bytes", layout_.row_bytes()}};
  json ep = json::array();
  LogCounts total;
  uint64_t versions = 0;
  double compute = 0, fold = 0, publish = 0, wait = 0, eval = 0;
  for (const EpochRecord& e : epochs) {
    const double v = static_cast<double>(std::max<uint64_t>(1, e.versions));
    ep.push_back({{"epoch", e.epoch},
                  {"train_rmse", e.train_rmse},
                  {"test_rmse", e.test_rmse},
                  {"online_rmse", e.online_rmse},
                  {"wall_s", e.wall_s},
                  {"epoch_s", e.epoch_s},
                  {"steps", e.steps},
                  {"versions", e.versions},
                  {"versions_per_s", e.versions_per_s},
                  {"staleness_mean", e.staleness_mean},
                  {"staleness_max", e.staleness_max},
                  {"lines_per_version", static_cast<double>(e.logged.lines) / v},
                  {"bytes_per_version", static_cast<double>(e.logged.lines * mf::kLineBytes) / v},
                  {"own_rows_per_version", static_cast<double>(e.logged.shard_rows) / v},
                  {"push_rows_per_version", static_cast<double>(e.logged.push_rows) / v},
                  {"folded_rows_per_version", static_cast<double>(e.logged.folded_rows) / v},
                  {"compute_s", e.compute_s},
                  {"fold_s", e.fold_s},
                  {"publish_s", e.publish_s},
                  {"wait_s", e.wait_s},
                  {"eval_s", e.eval_s}});
    total.shard_rows += e.logged.shard_rows;
    total.push_rows += e.logged.push_rows;
    total.folded_rows += e.logged.folded_rows;
    total.hot_rows += e.logged.hot_rows;
    total.lines += e.logged.lines;
    versions += e.versions;
    compute += e.compute_s;
    fold += e.fold_s;
    publish += e.publish_s;
    wait += e.wait_s;
    eval += e.eval_s;
  }
  j["epochs"] = ep;
  j["final_train_rmse"] = epochs.empty() ? json(nullptr) : json(epochs.back().train_rmse);
  j["final_test_rmse"] = epochs.empty() ? json(nullptr) : json(epochs.back().test_rmse);
  j["total_s"] = total_s;
  j["versions"] = versions;
  j["versions_per_s"] = static_cast<double>(versions) / total_s;
  const double v = static_cast<double>(std::max<uint64_t>(1, versions));
  const uint64_t rows = total.shard_rows + total.push_rows + total.folded_rows;
  j["logged"] = {{"lines_per_version", static_cast<double>(total.lines) / v},
                 {"bytes_per_version", static_cast<double>(total.lines * mf::kLineBytes) / v},
                 {"area_fraction_per_version",
                  static_cast<double>(total.lines) / v /
                      static_cast<double>(layout_.bytes(o_.rank) / mf::kLineBytes)},
                 {"rows_per_version", static_cast<double>(rows) / v},
                 {"hot_item_fraction", kHotItemFraction},
                 {"hot_row_share", static_cast<double>(total.hot_rows) / static_cast<double>(std::max<uint64_t>(1, rows))}};
  j["time_s"] = {{"compute", compute}, {"fold", fold}, {"publish", publish}, {"wait", wait}, {"eval", eval}};
  j["publish_busy_retries"] = publish_retries_;
  std::ofstream f(o_.json);
  f << j.dump(1) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "mf: cannot write %s\n", o_.json.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Matrix factorization by SGD on libdsm: Zipf-skewed synthetic ratings, item factors "
               "sharded one writer per worker, sparse row logging, a staleness bound in versions"};
  app.option_defaults()->always_capture_default();
  app.add_option("--users", o.data.users, "users (rows of the ratings matrix)")->check(CLI::Range(1u, 1u << 26));
  app.add_option("--items", o.data.items, "items (columns)")->check(CLI::Range(1u, 1u << 24));
  app.add_option("--ratings", o.data.ratings, "ratings drawn, before the train/test split")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  app.add_option("--true-rank", o.data.true_rank, "rank of the ground truth")->check(CLI::Range(1u, 256u));
  app.add_option("--zipf", o.data.zipf_s, "Zipf exponent of item popularity (0: uniform)")->check(CLI::Range(0.0, 4.0));
  app.add_option("--noise", o.data.noise, "standard deviation of the rating noise (the RMSE floor)")
      ->check(CLI::Range(0.0, 10.0));
  app.add_option("--test-fraction", o.data.test_fraction, "fraction of ratings held out")->check(CLI::Range(0.0, 0.9));
  app.add_option("--seed", o.data.seed, "seed of the data, the initial factors and the order");
  app.add_option("--factors", o.factors, "latent factors per user and item")->check(CLI::Range(1u, 1024u));
  app.add_option("--epochs", o.epochs, "passes over the ratings")->check(CLI::Range(1, mf::kMaxEpochs));
  app.add_option("--batch", o.batch, "ratings per step (one version per step)")->check(CLI::Range(size_t{1}, size_t{1} << 24));
  app.add_option("--lr", o.lr, "SGD step size")->check(CLI::Range(1e-6, 1.0));
  app.add_option("--reg", o.reg, "L2 regularisation")->check(CLI::Range(0.0, 10.0));
  app.add_option("--workers", o.workers, "number of workers W")->check(CLI::Range(1, 64));
  app.add_option("--rank", o.rank, "this worker's index K, 0..W-1")->check(CLI::Range(0, 63));
  app.add_option("--staleness", o.staleness, "SSP bound in versions: publish version v+1 only when "
                 "every other worker has published v-S")->check(CLI::Range(0, 1000000));
  app.add_option("--steps-per-epoch", o.steps_per_epoch, "cap on the steps per epoch (0: cover all ratings)");
  app.add_option("--prefix", o.prefix, "area names are <prefix>/shard/<rank>");
  app.add_option("--json", o.json, "write a summary (RMSE per epoch, versions/s, logging, timings) here");
  app.add_option("--wait-timeout", o.wait_timeout_s, "seconds to wait for another worker's version")
      ->check(CLI::PositiveNumber);
  app.add_option("--attach-timeout", o.attach_timeout_s, "seconds to wait for the other workers' areas")
      ->check(CLI::PositiveNumber);
  app.add_option("--reader-buffers", o.reader_buffers, "reader copies of the own area per host")
      ->check(CLI::Range(2u, 4u));
  app.add_flag("--quiet", o.quiet, "only the per-epoch lines");
  CLI11_PARSE(app, argc, argv);
  if (o.rank >= o.workers) {
    std::fprintf(stderr, "mf: --rank %d is not below --workers %d\n", o.rank, o.workers);
    return 2;
  }
  if (o.data.items < static_cast<uint32_t>(o.workers) || o.data.users < static_cast<uint32_t>(o.workers)) {
    std::fprintf(stderr, "mf: every worker needs users and items: --users and --items must be >= --workers\n");
    return 2;
  }
  Worker w(o);
  return w.Run();
}
