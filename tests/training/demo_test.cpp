// scripts/demo.sh, the README's main command, in its shortest form (--quick: one
// epoch of 120 steps per worker in each of its six runs: libdsm C++ on 1 and 3
// hosts, the same managed on 3, libdsm PyTorch on 3, DDP-gloo on 3, PyTorch in
// one process; --no-build:
// the binaries of this build, as meson runs the test inside it): it writes a
// summary.json that makes sense and an accuracy.png. And its interruption path: SIGINT to its
// process group (what Ctrl-C sends) while the 3-host run trains leaves no
// namespace, daemon, worker, socket or hugepage file behind. Needs root.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/multihost/virtual_cluster.h"

namespace dsm::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr int kDemoTimeoutS = 400;      // the quick demo takes 1-2 min on the 2-core machine
constexpr int kStopTimeoutS = 60;       // from SIGINT to the script's exit
constexpr int kTrainingSettleS = 3;     // SIGINT this long after the 3-host workers start
constexpr size_t kMinPngBytes = 4096;   // a plot with axes, labels and five curves
constexpr const char* kData = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.insert(e.path().filename());
  return out;
}

// A scratch dir for the results and a state dir for the cluster, both unique to this test.
struct Dirs {
  std::string scratch, out, state, log;
  explicit Dirs(const char* name) {
    char tmpl[] = "/tmp/dsm-demo-XXXXXX";
    if (mkdtemp(tmpl)) scratch = tmpl;
    out = scratch + "/results";
    log = scratch + "/demo.log";
    state = "/run/dsm/t" + std::string(name) + std::to_string(getpid());
  }
  ~Dirs() {
    std::error_code ec;
    if (!scratch.empty() && !std::getenv("DSM_KEEP_CLUSTER")) fs::remove_all(scratch, ec);
  }
};

// Starts demo.sh in a session of its own (so the whole group can be signalled like
// Ctrl-C does), with SIGINT at its default, output to dirs.log.
pid_t StartDemo(const Dirs& dirs) {
  const std::string script = Env("DSM_SOURCE_ROOT") + "/scripts/demo.sh";
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  setsid();
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  setenv("BUILD_DIR", Env("DSM_BUILD_ROOT").c_str(), 1);
  setenv("FASHION_MNIST", Env("DSM_FASHION_MNIST").c_str(), 1);
  setenv("DSMD", Env("DSM_DSMD").c_str(), 1);
  if (!freopen(dirs.log.c_str(), "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(126);
  execl("/bin/bash", "bash", script.c_str(), "--quick", "--no-build", "--out", dirs.out.c_str(),
        "--dir", dirs.state.c_str(), static_cast<char*>(nullptr));
  _exit(127);
}

// Exit status of the script (128+n if a signal killed it). Past the deadline its
// whole group is stopped (TERM, then KILL) and -1 returned.
int WaitExit(pid_t pid, int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (Clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "demo.sh did not finish within " << timeout_s << " s; stopping its group";
  killpg(pid, SIGTERM);
  for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) != pid; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  killpg(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// cluster.sh's namespace prefix for a state dir ("dsm" + 4 hex digits of its SHA-256).
std::string PrefixFor(const std::string& state) {
  return "dsm" + Capture("printf '%s' '" + state + "' | sha256sum | cut -c1-4 | tr -d '\\n'");
}

bool ProcessAlive(int pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// Nothing of the demo's is left: namespaces of its prefix, the daemons it
// started, any process naming its results dir (the workers), its state dir
// with the sockets, hugepage files.
void ExpectNothingLeft(const Dirs& dirs, const std::vector<int>& dsmd_pids,
                       const std::set<std::string>& hugepages_before) {
  const std::string prefix = PrefixFor(dirs.state);
  const std::string netns = Capture("ip netns list");
  EXPECT_EQ(netns.find(prefix + "-"), std::string::npos) << "namespaces left:\n" << netns;
  for (int pid : dsmd_pids) {
    EXPECT_FALSE(ProcessAlive(pid) && ReadFile("/proc/" + std::to_string(pid) + "/comm").rfind("dsmd", 0) == 0)
        << "dsmd " << pid << " still runs";
  }
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmd = ReadFile(e.path().string() + "/cmdline");
    EXPECT_EQ(cmd.find(dirs.out), std::string::npos) << "process " << name << " left: " << cmd;
  }
  std::error_code ec;
  EXPECT_FALSE(fs::exists(dirs.state, ec)) << "state dir (sockets) left: " << dirs.state;
  std::set<std::string> left;
  for (const std::string& f : ListDir("/dev/hugepages")) {
    if (!hugepages_before.count(f)) left.insert(f);
  }
  EXPECT_TRUE(left.empty()) << "hugepage files left, e.g. /dev/hugepages/" << *left.begin();
}

std::string Unavailable() {
  if (std::string why = MultihostUnavailableReason(); !why.empty()) return why;
  if (access(kData, R_OK) != 0) return std::string("no ") + kData + " (apt-get install dataset-fashion-mnist)";
  if (Capture("command -v gnuplot").empty()) return "no gnuplot (scripts/setup.sh installs gnuplot-nox)";
  if (Env("DSM_BUILD_ROOT").empty()) return "DSM_BUILD_ROOT not set (meson sets it)";
  if (Env("DSM_PYTHON_PACKAGE").empty()) return "the libdsm Python package is not built";
  if (Capture("/usr/bin/python3 -c 'import torch' 2>/dev/null && echo ok").empty()) {
    return "python3 cannot import torch (apt-get install python3-torch)";
  }
  return "";
}

TEST(Demo, QuickRunWritesSummaryAndPlot) {
  if (const std::string why = Unavailable(); !why.empty()) GTEST_SKIP() << why;
  Dirs dirs("q");
  ASSERT_FALSE(dirs.scratch.empty());
  const std::set<std::string> hugepages = ListDir("/dev/hugepages");
  const auto start = Clock::now();
  const pid_t pid = StartDemo(dirs);
  ASSERT_GT(pid, 0);
  const int rc = WaitExit(pid, kDemoTimeoutS);
  const std::string log = ReadFile(dirs.log);
  std::printf("%s", log.c_str());
  std::printf("demo.sh --quick took %.1f s\n",
              std::chrono::duration<double>(Clock::now() - start).count());
  ASSERT_EQ(rc, 0) << "demo.sh failed";
  EXPECT_NE(log.find("what limits the speed-up"), std::string::npos) << "no summary table";

  const json s = json::parse(ReadFile(dirs.out + "/summary.json"), nullptr, false);
  ASSERT_TRUE(s.is_object()) << "summary.json is not JSON";
  // cpp-1, cpp-3, managed-3, torch-3, ddp-3, torch-1, in that order.
  const size_t kHosts[] = {1, 3, 3, 3, 3, 1};
  const char* kSync[] = {"libdsm", "libdsm", "libdsm-managed", "libdsm", "ddp-gloo", "none"};
  ASSERT_EQ(s["runs"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const json& r = s["runs"][i];
    const size_t hosts = kHosts[i];
    const bool dsm = std::string(kSync[i]).starts_with("libdsm");
    SCOPED_TRACE(r["label"].get<std::string>());
    EXPECT_EQ(r["hosts"].get<size_t>(), hosts);
    EXPECT_EQ(r["sync"], kSync[i]);
    EXPECT_EQ(r["device"], hosts == 1 ? "none" : dsm ? "memif" : "tcp-veth");
    EXPECT_GT(r["time_per_step_ms"].get<double>(), 0);
    if (hosts > 1) {
      EXPECT_GT(r["wire"]["bytes_per_step"].get<double>(), 1e6);
    }
    EXPECT_EQ(r["model"], "mlp");
    ASSERT_EQ(r["per_epoch"].size(), 1u);
    const double acc = r["final_test_accuracy"].get<double>();
    EXPECT_GT(acc, 0.7);
    EXPECT_LE(acc, 1.0);
    EXPECT_EQ(r["per_epoch"][0]["test_accuracy"].get<double>(), acc);
    EXPECT_GT(r["time_per_epoch_s"].get<double>(), 0);
    EXPECT_GT(r["versions_per_s"].get<double>(), 0);
    for (const char* f : {"sync_pause", "wait", "compute"}) {
      const double x = r["worker_time_fraction"][f].get<double>();
      EXPECT_GE(x, 0) << f;
      EXPECT_LE(x, 1) << f;
    }
    EXPECT_EQ(r["daemons_cpu"].size(), dsm ? hosts : 0u);
    EXPECT_EQ(r["workers"].size(), hosts);
    EXPECT_LE(r["staleness"]["max"].get<int>(), r["staleness_bound"].get<int>());
    // The curve: the untrained model at 0 s, then points in time order, ending at the final accuracy.
    const json& curve = r["test_curve"];
    ASSERT_GE(curve.size(), 2u);
    EXPECT_EQ(curve.front()["wall_s"].get<double>(), 0);
    for (size_t k = 1; k < curve.size(); ++k) {
      EXPECT_GT(curve[k]["wall_s"].get<double>(), curve[k - 1]["wall_s"].get<double>());
    }
    EXPECT_EQ(curve.back()["test_accuracy"].get<double>(), acc);
  }
  const json& c = s["comparison"]["speedup"];
  EXPECT_DOUBLE_EQ(c["accuracy_difference"].get<double>(),
                   s["runs"][1]["final_test_accuracy"].get<double>() -
                       s["runs"][0]["final_test_accuracy"].get<double>());
  EXPECT_FALSE(c["limits"]["verdict"].get<std::string>().empty());
  EXPECT_EQ(s["comparison"]["time_per_step_ratios"].size(), 3u);
  // Managed sync against full sync: a fraction of the bytes.
  const json& m = s["comparison"]["managed_vs_full"];
  ASSERT_TRUE(m.is_object()) << s["comparison"].dump();
  EXPECT_LT(m["bytes_per_step_ratio"]["ratio"].get<double>(), 0.6);
  EXPECT_GT(m["time_per_step_ratio"]["ratio"].get<double>(), 0);

  const std::string png = ReadFile(dirs.out + "/accuracy.png");
  ASSERT_GE(png.size(), kMinPngBytes) << "accuracy.png missing or nearly empty";
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  ExpectNothingLeft(dirs, {}, hugepages);
}

TEST(Demo, InterruptedWhileTrainingOnThreeHostsLeavesNothing) {
  if (const std::string why = Unavailable(); !why.empty()) GTEST_SKIP() << why;
  Dirs dirs("i");
  ASSERT_FALSE(dirs.scratch.empty());
  const std::set<std::string> hugepages = ListDir("/dev/hugepages");
  const pid_t pid = StartDemo(dirs);
  ASSERT_GT(pid, 0);

  // Until the 3-host workers are set up and training (each prints its model line then).
  const std::string worker_log = dirs.out + "/cpp-3/worker2.log";
  const auto deadline = Clock::now() + std::chrono::seconds(kDemoTimeoutS);
  bool training = false;
  while (!training && Clock::now() < deadline) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) break;
    training = ReadFile(worker_log).find("[worker 2/3] model") != std::string::npos;
    if (!training) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<int> dsmd_pids;
  for (int h = 1; h <= 3; ++h) {
    int p = -1;
    std::ifstream(dirs.state + "/h" + std::to_string(h) + ".pid") >> p;
    if (p > 0) dsmd_pids.push_back(p);
  }
  if (!training) {
    WaitExit(pid, 1);
    FAIL() << "the 3-host run did not start training:\n" << ReadFile(dirs.log);
  }
  EXPECT_EQ(dsmd_pids.size(), 3u) << "pid files of the 3 daemons";
  std::this_thread::sleep_for(std::chrono::seconds(kTrainingSettleS));

  const auto sent = Clock::now();
  ASSERT_EQ(killpg(pid, SIGINT), 0);
  const int rc = WaitExit(pid, kStopTimeoutS);
  const double stop_s = std::chrono::duration<double>(Clock::now() - sent).count();
  const std::string log = ReadFile(dirs.log);
  std::printf("%s\ndemo.sh exited %d, %.1f s after SIGINT\n", log.c_str(), rc, stop_s);
  EXPECT_EQ(rc, 130) << "expected the exit status of an interrupted script";
  EXPECT_EQ(ReadFile(dirs.out + "/cpp-3/worker0.json"), "") << "training finished before SIGINT";
  ExpectNothingLeft(dirs, dsmd_pids, hugepages);
}

}  // namespace
}  // namespace dsm::testing
