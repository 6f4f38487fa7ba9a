// A barrier across hosts from single-writer counters.
//
// W processes (one per host, or several on one host). Process k is the writer of
// "<prefix>/counter/<k>", one cache line holding its round. Each round it
// increments its counter, publishes it (one version per round) and waits
// (dsm_wait_version) until it sees every other process at that round. A process
// can only be one round ahead of any other, so a counter seen at round r must
// read r or r + 1; anything else is counted as a violation. The time a round
// takes is the latency for a version to reach the slowest peer: its p50 and p99
// are printed (and written with --json).
//
//   sample_barrier --workers 3 --rank 0 --rounds 1000 [--json out.json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "peer.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kWho = "sample_barrier";

struct alignas(64) Counter {
  uint64_t round;  // version = round + 1: version 1 (round 0) says "this process is here"
};

struct Options {
  int workers = 1;
  int rank = 0;
  uint64_t rounds = 1000;
  uint64_t warmup = 20;  // first rounds left out of the percentiles (subscriptions settle)
  std::string prefix = "barrier";
  std::string json;
  double timeout_s = 30;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int Run(const Options& o) {
  dsm_init_opts init{};
  if (const int rc = dsm_init(&init); rc != DSM_OK) return samples::Report(kWho, "connecting to dsmd", rc);
  const std::string name = o.prefix + "/counter/" + std::to_string(o.rank);
  void* p = nullptr;
  if (const int rc = dsm_alloc(name.c_str(), sizeof(Counter), nullptr, &p); rc != DSM_OK) {
    return samples::Report(kWho, ("allocating " + name).c_str(), rc);
  }
  auto* own = static_cast<Counter*>(p);
  const auto timeout_ms = static_cast<uint32_t>(o.timeout_s * 1000);
  auto publish_round = [&](uint64_t r) {
    own->round = r;
    dsm_log(own, sizeof(Counter));
    const int rc = samples::PublishRetrying(own, o.timeout_s);
    if (rc != DSM_OK) return samples::Report(kWho, "publishing", rc);
    if (dsm_version(own) != r + 1) {
      std::fprintf(stderr, "%s: own counter at version %" PRIu64 " after round %" PRIu64 "\n", kWho,
                   dsm_version(own), r);
      return 1;
    }
    return 0;
  };
  // Round 0 first: another host's replica becomes attachable with the first version.
  if (publish_round(0) != 0) return 1;

  std::vector<const Counter*> others(static_cast<size_t>(o.workers), nullptr);
  for (int j = 0; j < o.workers; ++j) {
    if (j == o.rank) continue;
    const std::string other = o.prefix + "/counter/" + std::to_string(j);
    const void* q = nullptr;
    if (const int rc = dsm_attach(other.c_str(), timeout_ms, &q, nullptr); rc != DSM_OK) {
      return samples::Report(kWho, ("attaching " + other).c_str(), rc);
    }
    others[static_cast<size_t>(j)] = static_cast<const Counter*>(q);
  }

  // Waits until every other counter reads >= r; checks what it reads.
  uint64_t violations = 0;
  auto wait_round = [&](uint64_t r) {
    for (int j = 0; j < o.workers; ++j) {
      const Counter* c = others[static_cast<size_t>(j)];
      if (!c) continue;
      if (const int rc = dsm_wait_version(c, r + 1, timeout_ms); rc != DSM_OK) {
        std::fprintf(stderr, "%s: %d: waiting for %d at round %" PRIu64 " (it is at %" PRIu64 "): %s: %s\n",
                     kWho, o.rank, j, r, c->round, dsm_strerror(rc), dsm_last_error());
        return false;
      }
      const uint64_t seen = c->round;
      if (seen + 1 != dsm_version(c) || seen < r || seen > r + 1) {
        std::fprintf(stderr, "%s: %d: at round %" PRIu64 " process %d reads round %" PRIu64
                     " at version %" PRIu64 "\n", kWho, o.rank, r, j, seen, dsm_version(c));
        ++violations;
      }
    }
    return true;
  };

  std::vector<double> round_us;
  round_us.reserve(o.rounds);
  uint64_t done = 0;
  const auto start = Clock::now();
  for (uint64_t r = 1; r <= o.rounds; ++r) {
    const auto t0 = Clock::now();
    if (publish_round(r) != 0 || !wait_round(r)) break;
    done = r;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (r > o.warmup) round_us.push_back(us);
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  const double p50 = Percentile(round_us, 0.50), p99 = Percentile(round_us, 0.99);
  const double max = round_us.empty() ? 0 : *std::max_element(round_us.begin(), round_us.end());
  std::printf("[barrier %d/%d] %" PRIu64 "/%" PRIu64 " rounds in %.2f s (%.0f rounds/s); round time "
              "p50 %.0f us  p99 %.0f us  max %.0f us (after %" PRIu64 " warm-up rounds); violations %"
              PRIu64 "\n", o.rank, o.workers, done, o.rounds, total_s,
              static_cast<double>(done) / total_s, p50, p99, max, o.warmup, violations);
  std::fflush(stdout);
  if (!o.json.empty()) {
    nlohmann::json j = {{"sample", "barrier"},     {"workers", o.workers},     {"rank", o.rank},
                        {"rounds", o.rounds},      {"rounds_done", done},      {"warmup", o.warmup},
                        {"total_s", total_s},      {"round_p50_us", p50},      {"round_p99_us", p99},
                        {"round_max_us", max},     {"violations", violations}};
    std::vector<uint64_t> last_seen;
    for (const Counter* c : others) {
      if (c) last_seen.push_back(c->round);
    }
    j["last_seen_rounds"] = last_seen;
    std::ofstream(o.json) << j.dump(1) << "\n";
  }
  if (done == o.rounds) {
    // One more round as a done mark: every other process has seen our last round
    // once it sees this one; stay until they all have (not an error if one is slow).
    if (publish_round(o.rounds + 1) != 0) return 1;
    wait_round(o.rounds + 1);
  }
  dsm_fini();
  return done == o.rounds && violations == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"A barrier across hosts: each process writes its round counter and waits for everyone's"};
  app.option_defaults()->always_capture_default();
  app.add_option("--workers", o.workers, "processes in the barrier")->check(CLI::Range(1, 64));
  app.add_option("--rank", o.rank, "this process's index, 0..workers-1")->check(CLI::Range(0, 63));
  app.add_option("--rounds", o.rounds, "barrier rounds")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--warmup", o.warmup, "first rounds left out of the latency percentiles");
  app.add_option("--prefix", o.prefix, "areas are <prefix>/counter/<rank>");
  app.add_option("--json", o.json, "write the result here");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for another process")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (o.rank >= o.workers) {
    std::fprintf(stderr, "%s: --rank %d is not below --workers %d\n", kWho, o.rank, o.workers);
    return 2;
  }
  return Run(o);
}
