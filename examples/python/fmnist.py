"""What the PyTorch Fashion-MNIST programs share with each other and with the
C++ example (examples/fashion_mnist): the data, the 784-1024-1024-10 MLP as one
flat parameter vector in the C++ layout, its initialisation, the learning-rate
schedule, the evaluation, the per-step records and the JSON summary, in the
shape examples/fashion_mnist/train.cpp writes so that one summary tool reads
every run.

The random streams are NumPy's and torch's, not libstdc++'s, so the initial
weights and the data order are equal among the Python runs (same seed) but not
byte-equal to the C++ run's; their distributions are the same.
"""
import argparse
import gzip
import json
import math
import os
import resource
import struct
import time

import numpy as np

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
# The training set's mean and standard deviation of x/255, as in train.cpp.
PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530
EVAL_BATCH = 500
# How long a finished worker waits for the others' done marks before leaving anyway.
LEAVE_TIMEOUT_S = 10


def limit_threads(n):
    """One BLAS/OpenMP thread per worker, as the C++ example runs OpenBLAS: the
    workers and daemons share the machine's cores. Must run before torch loads
    (OpenBLAS reads its variable once)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)


def common_args(description):
    """The options every program takes, with train.cpp's names and defaults."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--hidden", type=int, default=1024, help="hidden layer width")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="minibatch per worker and step")
    p.add_argument("--lr", type=float, default=0.1, help="peak learning rate per worker")
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--schedule", choices=["cosine", "constant"], default="cosine")
    p.add_argument("--warmup", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default="")
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--steps-per-epoch", type=int, default=0, help="cap (0: the whole shard)")
    p.add_argument("--test-limit", type=int, default=10000)
    p.add_argument("--evals-per-epoch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch/BLAS threads")
    p.add_argument("--quiet", action="store_true")
    return p


def check_args(a):
    if not 0 <= a.rank < a.workers:
        raise SystemExit(f"--rank {a.rank} is not in 0..{a.workers - 1}")
    if not (a.lr > 0 and math.isfinite(a.lr)):
        raise SystemExit("--lr must be a positive number")
    if a.epochs < 1 or a.batch < 1 or a.evals_per_epoch < 1:
        raise SystemExit("--epochs, --batch and --evals-per-epoch must be >= 1")


# ---------------------------------------------------------------------------
# Data

def _read_idx(path, dims):
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SystemExit(f"cannot read {path}: {e} (the Fashion-MNIST files come with "
                         "Debian's dataset-fashion-mnist: apt-get install "
                         "dataset-fashion-mnist, or use --data DIR)")
    magic = struct.unpack(">I", raw[:4])[0]
    if magic != 0x0800 | dims:
        raise SystemExit(f"{path}: not an IDX file of {dims}-dimensional unsigned bytes")
    shape = struct.unpack(f">{dims}I", raw[4:4 + 4 * dims])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != math.prod(shape):
        raise SystemExit(f"{path}: {data.size} bytes of data for shape {shape}")
    return data.reshape(shape)


def standardise(pixels):
    """uint8 images (N, 28, 28) -> float32 (N, 784), as train.cpp's ToFloat."""
    x = pixels.reshape(len(pixels), -1).astype(np.float32)
    return (x * np.float32(1 / 255) - np.float32(PIXEL_MEAN)) * np.float32(1 / PIXEL_STD)


def load(data_dir, test_limit):
    """(train images uint8, train labels, test x float32, test labels) as NumPy."""
    tr_x = _read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"), 3)
    tr_y = _read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"), 1)
    te_x = _read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"), 3)
    te_y = _read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"), 1)
    n = min(test_limit, len(te_x))
    return tr_x, tr_y, standardise(te_x[:n]), te_y[:n].astype(np.int64)


def shard(n_train, workers, rank, seed):
    """The same permutation in every worker; worker k takes every W-th example."""
    perm = np.random.default_rng(seed ^ 0x5EED5EED).permutation(n_train)
    return perm[rank::workers].copy()


def steps_per_epoch(n_train, workers, batch, cap):
    """Every worker takes the same number of steps (from the smallest shard)."""
    s = (n_train // workers) // batch
    if cap:
        s = min(s, cap)
    if s == 0:
        raise SystemExit(f"a shard of {n_train // workers} examples holds no batch of {batch}")
    return s


def eval_points(steps, evals):
    """Steps (1-based, within an epoch) after which worker 0 evaluates besides the
    epoch's end: evenly spaced, never the epoch's last step (that one is the
    epoch-end evaluation; two points one step apart made the curve zig-zag)."""
    return {s for s in range(1, steps) if (s * evals) // steps > ((s - 1) * evals) // steps}


# ---------------------------------------------------------------------------
# Model: one flat float vector, layer l's weights (in x out, row-major) then
# its biases, as examples/fashion_mnist/model.cpp lays them out.

def layer_sizes(hidden):
    return [784, hidden, hidden, 10]


def num_params(sizes):
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def describe(sizes):
    return "-".join(map(str, sizes)) + f" ({num_params(sizes)} parameters)"


def init_params(sizes, seed):
    """He-normal weights for layers followed by ReLU, N(0, 1/fan_in) for the
    logits, zero biases (model.cpp's Init), from torch's generator."""
    import torch
    g = torch.Generator().manual_seed(seed)
    flat = torch.zeros(num_params(sizes), dtype=torch.float32)
    off = 0
    for l, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        std = math.sqrt((2.0 if l + 2 < len(sizes) else 1.0) / n_in)
        flat[off:off + n_in * n_out] = torch.randn(n_in * n_out, generator=g) * std
        off += n_in * n_out + n_out
    return flat


def make_model(sizes, flat):
    """An nn.Module whose parameters (weights in x out, biases) are views into
    one flat tensor, `model.flat`, a copy of `flat` in the C++ layout: a
    libdsm worker writes its whole view there in three vector operations and
    maps each gradient onto its range of the area (`model.ranges`). Separate
    parameters rather than slices of one: the backward pass of six slices of
    one parameter would build six full-size gradients and add them up."""
    import torch
    import torch.nn.functional as F

    class FlatMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.flat = flat.clone()
            self.weights = torch.nn.ParameterList()
            self.biases = torch.nn.ParameterList()
            self.ranges = []  # (parameter, offset in flat, count)
            off = 0
            for n_in, n_out in zip(sizes[:-1], sizes[1:]):
                w = torch.nn.Parameter(self.flat[off:off + n_in * n_out].view(n_in, n_out))
                b = torch.nn.Parameter(self.flat[off + n_in * n_out:off + n_in * n_out + n_out])
                self.weights.append(w)
                self.biases.append(b)
                self.ranges += [(w, off, n_in * n_out), (b, off + n_in * n_out, n_out)]
                off += n_in * n_out + n_out

        def forward(self, x):
            last = len(self.weights) - 1
            for i, (w, b) in enumerate(zip(self.weights, self.biases)):
                x = torch.addmm(b, x, w)
                if i < last:
                    x = F.relu(x)
            return x

    return FlatMLP()


def evaluate(model, test_x, test_y):
    """(accuracy, mean loss) on the test set, batches of 500 as train.cpp."""
    import torch
    import torch.nn.functional as F
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(test_x), EVAL_BATCH):
            logits = model(test_x[i:i + EVAL_BATCH])
            y = test_y[i:i + EVAL_BATCH]
            correct += int((logits.argmax(1) == y).sum())
            loss += float(F.cross_entropy(logits, y, reduction="sum"))
    return correct / len(test_x), loss / len(test_x)


def lr_schedule(a, total_steps):
    """Learning rate of the step after `done` steps: linear warm-up over the first
    --warmup of the run, then constant or a cosine decay to 0 (train.cpp)."""
    warmup_steps = a.warmup * total_steps

    def lr_at(done):
        lr = a.lr
        if done < warmup_steps:
            lr *= (done + 1) / (warmup_steps + 1)
        if a.schedule == "cosine":
            lr *= 0.5 * (1.0 + math.cos(math.pi * done / total_steps))
        return lr
    return lr_at


# ---------------------------------------------------------------------------
# Records and the JSON summary (train.cpp's WriteJson, same keys)

def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


class Recorder:
    """Per-step and per-epoch timings, the accuracy curve, and the summary."""

    def __init__(self, a, sizes, steps, program, sync):
        self.a, self.sizes, self.steps, self.program, self.sync = a, sizes, steps, program, sync
        self.per_step = {k: [] for k in ("compute_ms", "publish_ms", "wait_ms", "staleness",
                                         "loss")}
        self.epochs = []
        self.curve = []
        self.extra = {}
        self.start = None

    def begin(self):
        self.cpu0 = cpu_seconds()
        self.start = time.monotonic()

    def wall(self):
        return time.monotonic() - self.start

    def step(self, compute_s, publish_s, wait_s, staleness, loss):
        r3 = lambda v: round(v, 3)  # noqa: E731
        self.per_step["compute_ms"].append(r3(compute_s * 1e3))
        self.per_step["publish_ms"].append(r3(publish_s * 1e3))
        self.per_step["wait_ms"].append(r3(wait_s * 1e3))
        self.per_step["staleness"].append(int(staleness))
        self.per_step["loss"].append(r3(loss))

    def point(self, step, evaluate):
        """Adds evaluate()'s accuracy to the curve at the time the evaluated model
        existed (before the evaluation, as train.cpp). Returns (accuracy, loss)."""
        wall = self.wall()
        acc, loss = evaluate()
        self.curve.append({"wall_s": wall, "step": step, "test_accuracy": acc})
        return acc, loss

    def epoch(self, e):
        """e: dict with train.cpp's EpochRecord fields; prints the progress line."""
        e["sync_fraction"] = e["publish_s"] / e["epoch_s"]
        e["wait_fraction"] = e["wait_s"] / e["epoch_s"]
        self.epochs.append(e)
        busy = e["compute_s"] + e["publish_s"] + e["wait_s"] + e["eval_s"]
        pct = lambda x: 100 * x / busy if busy > 0 else 0  # noqa: E731
        acc = "-" if e.get("test_accuracy") is None else f"{e['test_accuracy']:.4f}"
        sync = "allreduce" if self.sync == "ddp-gloo" else "publish"
        print(f"[{self.program} {self.a.rank}/{self.a.workers}] epoch {e['epoch']}/"
              f"{self.a.epochs}  loss {e['train_loss']:.4f}  test_acc {acc}  wall "
              f"{e['wall_s']:.1f} s (epoch {e['epoch_s']:.1f} s, "
              f"{1e3 * e['epoch_s'] / e['steps']:.1f} ms/step)  staleness mean "
              f"{e['staleness_mean']:.2f} max {e['staleness_max']}  samples/s "
              f"{e['samples_per_s']:.0f}  time: compute {pct(e['compute_s']):.0f}% {sync} "
              f"{pct(e['publish_s']):.0f}% wait {pct(e['wait_s']):.0f}% eval "
              f"{pct(e['eval_s']):.0f}%", flush=True)

    def write(self):
        total = self.wall()
        cpu = cpu_seconds() - self.cpu0
        if not self.a.json:
            return
        a = self.a
        t = {k: sum(e[k + "_s"] for e in self.epochs)
             for k in ("compute", "publish", "wait", "eval")}
        final = self.epochs[-1].get("test_accuracy") if self.epochs else None
        j = {
            "example": "fashion_mnist",
            "program": self.program,
            "config": {
                "model": "mlp", "architecture": describe(self.sizes),
                "parameters": num_params(self.sizes), "workers": a.workers, "rank": a.rank,
                "epochs": a.epochs, "batch": a.batch, "lr": a.lr, "momentum": a.momentum,
                "schedule": a.schedule, "warmup": a.warmup,
                "staleness_bound": getattr(a, "staleness", 0), "seed": a.seed,
                "steps_per_epoch": self.steps, "test_examples": a.test_limit,
                "framework": "pytorch", "sync": self.sync, "threads": a.threads,
                "area_bytes": num_params(self.sizes) * 4,
            },
            "epochs": self.epochs,
            "final_test_accuracy": final,
            "total_s": total,
            "cpu_s": cpu,
            "test_curve": self.curve,
            "time_s": t,
            "time_fraction": {k: v / total for k, v in t.items()},
            "per_step": self.per_step,
        }
        j.update(self.extra)
        with open(a.json, "w") as f:
            json.dump(j, f, indent=1)
            f.write("\n")
