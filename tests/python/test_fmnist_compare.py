"""The PyTorch comparison of scripts/demo.sh end to end, in its quick form: the
Fashion-MNIST MLP under DDP-gloo (two workers on the loopback), in one process,
and over libdsm (two workers on this test's dsmd), a few steps each; then the
demo's summary tool over the three runs. Skipped without the data set."""
import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples", "python")
SUMMARY = os.path.join(ROOT, "examples", "fashion_mnist", "demo_summary.py")
DATA = "/usr/share/datasets/fashion-mnist"
RUN_TIMEOUT_S = 120
# Short runs: 24 steps of 64, the curve at steps 12 and 24, 1000 test images.
QUICK = ["--epochs", "1", "--steps-per-epoch", "24", "--evals-per-epoch", "2",
         "--test-limit", "1000"]

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
    reason="no Fashion-MNIST data (apt-get install dataset-fashion-mnist)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(script, workers, out_dir, extra):
    """Runs `workers` processes of `script` to completion; their JSON summaries."""
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = []
    for k in range(workers):
        cmd = [sys.executable, os.path.join(EXAMPLES, script), "--workers", str(workers),
               "--rank", str(k), "--json", os.path.join(out_dir, f"worker{k}.json"),
               *QUICK, *extra]
        log = open(os.path.join(out_dir, f"worker{k}.log"), "w")
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    try:
        for p, log in procs:
            p.wait(timeout=RUN_TIMEOUT_S)
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    for k, (p, _) in enumerate(procs):
        with open(os.path.join(out_dir, f"worker{k}.log")) as f:
            assert p.returncode == 0, f"{script} worker {k} failed:\n{f.read()}"
    # What scripts/train.sh adds next to the workers' summaries.
    with open(os.path.join(out_dir, "daemons.json"), "w") as f:
        json.dump({"device": "loopback" if workers > 1 else "none", "hosts": []}, f)
    out = []
    for k in range(workers):
        with open(os.path.join(out_dir, f"worker{k}.json")) as f:
            out.append(json.load(f))
    return out


def check_summary(j, workers, sync):
    assert j["config"]["workers"] == workers
    assert j["config"]["sync"] == sync
    assert j["config"]["steps_per_epoch"] == 24
    assert len(j["per_step"]["loss"]) == 24
    assert j["per_step"]["loss"][-1] < j["per_step"]["loss"][0]
    if j["config"]["rank"] == 0:
        acc = j["final_test_accuracy"]
        assert 0.5 < acc <= 1.0
        curve = j["test_curve"]
        # The untrained model at 0 s, one point mid-epoch, the epoch's end.
        assert [p["step"] for p in curve] == [0, 12, 24]
        assert curve[-1]["test_accuracy"] == acc
        assert all(a["wall_s"] < b["wall_s"] for a, b in zip(curve, curve[1:]))


def test_ddp_local_and_libdsm_runs_and_summary(dsmd, tmp_path):
    ddp = run_workers("train_ddp.py", 2, str(tmp_path / "ddp"),
                      ["--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                       "--iface", "lo"])
    for j in ddp:
        check_summary(j, 2, "ddp-gloo")
        # The gradient (4 bytes a parameter) is all-reduced once per step.
        assert j["wire"]["allreduce_bytes_per_step"] == 4 * j["config"]["parameters"]
        assert j["wire"]["tx_bytes"] > 0
    # Synchronous: both workers end with the same model, so rank 0 speaks for both.
    local = run_workers("train_ddp.py", 1, str(tmp_path / "local"), [])
    check_summary(local[0], 1, "none")
    dsm = run_workers("train_dsm.py", 2, str(tmp_path / "dsm"),
                      ["--socket", dsmd.socket, "--prefix", "pytest-fmnist"])
    for j in dsm:
        check_summary(j, 2, "libdsm")
        # One version per step and the done mark.
        assert j["own_area"]["version"] == 25
        assert max(j["per_step"]["staleness"]) <= j["config"]["staleness_bound"]

    out = tmp_path / "summary.json"
    r = subprocess.run([sys.executable, SUMMARY, "--out", str(out),
                        f"DDP={tmp_path / 'ddp'}", f"local={tmp_path / 'local'}",
                        f"libdsm={tmp_path / 'dsm'}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    assert [x["label"] for x in s["runs"]] == ["DDP", "local", "libdsm"]
    for x in s["runs"]:
        assert x["time_per_step_ms"] > 0
        assert x["final_test_accuracy"] > 0.5
    assert s["runs"][0]["wire"]["bytes_per_step"] > 0
    assert "libdsm_pytorch_vs_ddp" in s["comparison"]["time_per_step_ratios"]
    assert "ms/step" in r.stdout
