// demo_summary: merges the runs of scripts/demo.sh into one JSON summary, a
// gnuplot script for the accuracy plot, and a short table.
//
//   demo_summary --out summary.json --plot accuracy.gp --png accuracy.png RUN_DIR...
//
// Each RUN_DIR is what `scripts/train.sh --out DIR` keeps: worker<K>.json (the
// fashion_mnist summaries, worker 0's with the test accuracy) and daemons.json
// (each dsmd's CPU time while the workers ran). Written in C++ because a fresh
// Debian machine has neither python3 nor jq.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using nlohmann::json;

// A run's CPU demand above this share of the machine's cores means the run was
// limited by cores, not by the sync pauses or the waits.
constexpr double kCpuBoundShare = 0.85;

bool ReadJson(const std::string& path, json* out, std::string* error) {
  std::ifstream f(path);
  if (!f) {
    *error = "cannot read " + path;
    return false;
  }
  *out = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    *error = path + " is not a JSON object";
    return false;
  }
  return true;
}

double Num(const json& j, const char* key, double fallback = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

double Round(double x, double unit) { return std::round(x / unit) * unit; }

// One run (one train.sh --out dir) summarised; `workers` are sorted by rank.
bool SummariseRun(const std::string& dir, json* run, std::string* error) {
  std::vector<json> workers;
  for (int k = 0;; ++k) {
    const std::string path = dir + "/worker" + std::to_string(k) + ".json";
    if (!std::filesystem::exists(path)) break;
    json w;
    if (!ReadJson(path, &w, error)) return false;
    workers.push_back(std::move(w));
  }
  if (workers.empty()) {
    *error = "no worker0.json in " + dir + " (did the run finish?)";
    return false;
  }
  json daemons;
  if (!ReadJson(dir + "/daemons.json", &daemons, error)) return false;
  const json& w0 = workers[0];
  const json& cfg = w0["config"];
  const size_t hosts = cfg["workers"].get<size_t>();
  if (workers.size() != hosts) {
    *error = dir + " holds " + std::to_string(workers.size()) + " worker summaries for " +
             std::to_string(hosts) + " workers";
    return false;
  }
  const double n = static_cast<double>(hosts);

  json epochs = json::array();
  for (size_t e = 0; e < w0["epochs"].size(); ++e) {
    double loss = 0, versions = 0, stale = 0, sync = 0, wait = 0, samples = 0, epoch_s = 0;
    int stale_max = 0;
    for (const json& w : workers) {
      const json& x = w["epochs"][e];
      loss += Num(x, "train_loss") / n;
      versions += Num(x, "versions_per_s") / n;
      stale += Num(x, "staleness_mean") / n;
      sync += Num(x, "publish_s") / Num(x, "epoch_s", 1) / n;
      wait += Num(x, "wait_s") / Num(x, "epoch_s", 1) / n;
      samples += Num(x, "samples_per_s");
      epoch_s = std::max(epoch_s, Num(x, "epoch_s"));
      stale_max = std::max(stale_max, x["staleness_max"].get<int>());
    }
    const json& x0 = w0["epochs"][e];
    epochs.push_back({{"epoch", x0["epoch"]},
                      {"test_accuracy", x0["test_accuracy"]},
                      {"test_loss", x0.value("test_loss", json(nullptr))},
                      {"train_loss", loss},
                      {"wall_s", x0["wall_s"]},
                      {"epoch_s", epoch_s},
                      {"versions_per_s", versions},
                      {"staleness_mean", stale},
                      {"staleness_max", stale_max},
                      {"sync_pause_fraction", sync},
                      {"wait_fraction", wait},
                      {"samples_per_s", samples}});
  }

  // Whole run: fractions of each worker's time, averaged over workers.
  double wall = 0, sync = 0, wait = 0, compute = 0, eval = 0, workers_cpu = 0, samples = 0;
  double compute_ms = 0, versions = 0;
  json per_worker = json::array();
  for (const json& w : workers) {
    const double total = Num(w, "total_s", 1);
    const json& f = w["time_fraction"];
    const size_t steps = w["config"]["steps_per_epoch"].get<size_t>() * w["epochs"].size();
    wall = std::max(wall, total);
    sync += Num(f, "publish") / n;
    wait += Num(f, "wait") / n;
    compute += Num(f, "compute") / n;
    eval += Num(f, "eval") / n;
    workers_cpu += Num(w, "cpu_s");
    samples += static_cast<double>(steps * w["config"]["batch"].get<size_t>()) / total;
    versions += static_cast<double>(steps) / total / n;
    compute_ms += Num(w["time_s"], "compute") * 1e3 / static_cast<double>(steps) / n;
    per_worker.push_back({{"rank", w["config"]["rank"]},
                          {"total_s", total},
                          {"cpu_s", Num(w, "cpu_s")},
                          {"sync_pause_fraction", Num(f, "publish")},
                          {"wait_fraction", Num(f, "wait")},
                          {"publish_busy_retries", w.value("publish_busy_retries", 0)}});
  }
  double stale_sum = 0;
  size_t stale_n = 0;
  int stale_max = 0;
  for (const json& w : workers) {
    for (const json& s : w["per_step"]["staleness"]) {
      stale_sum += s.get<double>();
      ++stale_n;
      stale_max = std::max(stale_max, s.get<int>());
    }
  }
  const double daemon_wall = Num(daemons, "wall_s", wall);
  json daemon_cpu = json::array();
  double daemons_cpu = 0;
  for (const json& d : daemons["hosts"]) {
    const double cpu = Num(d, "cpu_s");
    daemons_cpu += cpu;
    daemon_cpu.push_back({{"host", d["host"]},
                          {"cpu_s", cpu},
                          {"core_percent", Round(100 * cpu / daemon_wall, 0.1)}});
  }

  *run = {{"hosts", hosts},
          {"device", daemons.value("device", "")},
          {"mtu", daemons.value("mtu", 0)},
          {"model", cfg["model"]},
          {"architecture", cfg["architecture"]},
          {"parameters", cfg["parameters"]},
          {"epochs", w0["epochs"].size()},
          {"steps_per_epoch", cfg["steps_per_epoch"]},
          {"batch_per_worker", cfg["batch"]},
          {"staleness_bound", cfg["staleness_bound"]},
          {"final_test_accuracy", w0["final_test_accuracy"]},
          {"wall_s", wall},
          {"time_per_epoch_s", wall / static_cast<double>(w0["epochs"].size())},
          {"versions_per_s", versions},
          {"samples_per_s", samples},
          {"staleness", {{"mean", stale_n ? stale_sum / static_cast<double>(stale_n) : 0.0},
                         {"max", stale_max}}},
          {"worker_time_fraction",
           {{"compute", compute}, {"sync_pause", sync}, {"wait", wait}, {"eval", eval}}},
          {"compute_ms_per_step", compute_ms},
          {"cpu_cores_used",
           {{"workers", workers_cpu / wall},
            {"daemons", daemons_cpu / daemon_wall},
            {"machine", Num(daemons["machine"], "busy_cores", -1)}}},
          {"daemons_cpu", daemon_cpu},
          {"workers", per_worker},
          {"per_epoch", epochs},
          {"test_curve", w0.value("test_curve", json::array())}};
  return true;
}

// What limits the speed-up of the largest run over the smallest, from measurements.
json Limits(const json& base, const json& big, unsigned cores) {
  const json& used = big["cpu_cores_used"];
  const double ours = used["workers"].get<double>() + used["daemons"].get<double>();
  // Every process's CPU use (train.sh measures it), ours where it was not measured.
  const double busy = std::max(ours, used["machine"].get<double>());
  const double sync = big["worker_time_fraction"]["sync_pause"].get<double>();
  const double wait = big["worker_time_fraction"]["wait"].get<double>();
  const double c1 = base["compute_ms_per_step"].get<double>();
  const double cn = big["compute_ms_per_step"].get<double>();
  char text[512];
  if (busy >= kCpuBoundShare * cores) {
    std::snprintf(text, sizeof text,
                  "CPU: %zu workers and %zu daemons share %u cores, %.2f of them busy (workers "
                  "%.2f, daemons %.2f, other processes %.2f); a step's compute took %.0f ms "
                  "instead of %.0f ms on 1 host; sync pauses %.0f%%, waits for versions %.0f%% "
                  "of worker time",
                  big["hosts"].get<size_t>(), big["hosts"].get<size_t>(), cores, busy,
                  used["workers"].get<double>(), used["daemons"].get<double>(), busy - ours, cn,
                  c1, 100 * sync, 100 * wait);
  } else if (wait >= sync) {
    std::snprintf(text, sizeof text,
                  "waiting for other workers' versions (replication latency): %.0f%% of worker "
                  "time, with %.2f of %u cores busy",
                  100 * wait, busy, cores);
  } else {
    std::snprintf(text, sizeof text,
                  "sync pauses (publish + service): %.0f%% of worker time, with %.2f of %u "
                  "cores busy",
                  100 * sync, busy, cores);
  }
  return {{"cores", cores},
          {"busy_cores", busy},
          {"ours_cores", ours},
          {"compute_ms_per_step", {{"base", c1}, {"largest", cn}}},
          {"sync_pause_fraction", sync},
          {"wait_fraction", wait},
          {"verdict", text}};
}

std::string HostsLabel(const json& run) {
  const size_t h = run["hosts"].get<size_t>();
  return std::to_string(h) + (h == 1 ? " host" : " hosts");
}

// Accuracy against wall time, one line per run, the data inline.
bool WritePlot(const json& runs, const std::string& gp, const std::string& png) {
  std::ofstream f(gp);
  for (size_t i = 0; i < runs.size(); ++i) {
    f << "$run" << i << " << EOD\n";
    for (const json& p : runs[i]["test_curve"]) {
      f << p["wall_s"].get<double>() << " " << p["test_accuracy"].get<double>() << "\n";
    }
    f << "EOD\n";
  }
  f << "set terminal pngcairo size 900,560 font ',11'\n"
    << "set output '" << png << "'\n"
    << "set title 'Fashion-MNIST " << runs[0]["model"].get<std::string>()
    << " on libdsm: test accuracy (worker 0)'\n"
    << "set xlabel 'wall time (s)'\nset ylabel 'test accuracy'\n"
    << "set yrange [0.5:0.95]\nset grid\nset key bottom right\n"
    << "plot ";
  for (size_t i = 0; i < runs.size(); ++i) {
    f << (i ? ", " : "") << "$run" << i << " with linespoints lw 2 pt 7 title '"
      << HostsLabel(runs[i]) << "'";
  }
  f << "\n";
  return static_cast<bool>(f);
}

void PrintTable(const json& s) {
  std::printf("%-8s %-9s %-10s %-10s %-10s %-14s %-6s %-6s %s\n", "run", "final acc",
              "wall", "s/epoch", "versions/s", "staleness", "sync", "wait", "dsmd CPU (% of a core)");
  for (const json& r : s["runs"]) {
    std::string cpu;
    for (const json& d : r["daemons_cpu"]) {
      char b[16];
      std::snprintf(b, sizeof b, "%s%.0f%%", cpu.empty() ? "" : " ", d["core_percent"].get<double>());
      cpu += b;
    }
    char stale[32];
    std::snprintf(stale, sizeof stale, "%.2f (max %d)", r["staleness"]["mean"].get<double>(),
                  r["staleness"]["max"].get<int>());
    std::printf("%-8s %-9.4f %-10.1f %-10.1f %-10.1f %-14s %-6.1f %-6.1f %s\n",
                HostsLabel(r).c_str(), r["final_test_accuracy"].get<double>(),
                r["wall_s"].get<double>(), r["time_per_epoch_s"].get<double>(),
                r["versions_per_s"].get<double>(), stale,
                100 * r["worker_time_fraction"]["sync_pause"].get<double>(),
                100 * r["worker_time_fraction"]["wait"].get<double>(), cpu.c_str());
  }
  std::printf("(sync and wait: %% of worker time in dsm publish/service and in dsm_wait_version)\n");
  for (const json& r : s["runs"]) {
    if (r["hosts"].get<size_t>() > 1 && !r["device"].get<std::string>().empty()) {
      std::printf("(%s: DPDK %s between the daemons, MTU %d)\n", HostsLabel(r).c_str(),
                  r["device"].get<std::string>().c_str(), r["mtu"].get<int>());
    }
  }
  if (s.contains("comparison")) {
    const json& c = s["comparison"];
    std::printf("accuracy, %s minus %s: %+.4f;  speed-up (samples/s): %.2fx\n",
                c["larger"].get<std::string>().c_str(), c["smaller"].get<std::string>().c_str(),
                c["accuracy_difference"].get<double>(), c["speedup_samples_per_s"].get<double>());
    std::printf("what limits the speed-up: %s\n", c["limits"]["verdict"].get<std::string>().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"demo_summary: merge scripts/demo.sh runs into summary.json and an accuracy plot"};
  std::vector<std::string> dirs;
  std::string out, plot, png;
  app.add_option("runs", dirs, "run directories (scripts/train.sh --out), smallest first")
      ->required()->check(CLI::ExistingDirectory);
  app.add_option("--out", out, "the JSON summary to write")->required();
  app.add_option("--plot", plot, "write a gnuplot script for the accuracy plot here");
  app.add_option("--png", png, "the PNG the gnuplot script draws")->needs("--plot");
  CLI11_PARSE(app, argc, argv);

  json runs = json::array();
  for (const std::string& d : dirs) {
    json run;
    std::string error;
    if (!SummariseRun(d, &run, &error)) {
      std::fprintf(stderr, "demo_summary: %s\n", error.c_str());
      return 1;
    }
    runs.push_back(std::move(run));
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  json s = {{"example", "fashion_mnist"}, {"machine", {{"cores", cores}}}, {"runs", runs}};
  if (runs.size() >= 2) {
    const json& a = runs.front();
    const json& b = runs.back();
    s["comparison"] = {
        {"smaller", HostsLabel(a)},
        {"larger", HostsLabel(b)},
        {"final_test_accuracy", {{HostsLabel(a), a["final_test_accuracy"]},
                                 {HostsLabel(b), b["final_test_accuracy"]}}},
        {"accuracy_difference",
         b["final_test_accuracy"].get<double>() - a["final_test_accuracy"].get<double>()},
        {"time_per_epoch_ratio",
         b["time_per_epoch_s"].get<double>() / a["time_per_epoch_s"].get<double>()},
        {"speedup_samples_per_s", b["samples_per_s"].get<double>() / a["samples_per_s"].get<double>()},
        {"limits", Limits(a, b, cores)}};
  }
  std::ofstream f(out);
  f << s.dump(1) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "demo_summary: cannot write %s\n", out.c_str());
    return 1;
  }
  if (!plot.empty() && !WritePlot(runs, plot, png.empty() ? "accuracy.png" : png)) {
    std::fprintf(stderr, "demo_summary: cannot write %s\n", plot.c_str());
    return 1;
  }
  PrintTable(s);
  return 0;
}
