"""What it costs Python to get at an area: attach, then the array and a torch
tensor over it, for areas of 1, 16 and 64 MiB, next to a copy of the same
bytes (what a library that hands out copies would cost). Issue target: the
time to obtain a 64 MiB array does not grow with the size (at most 50 us).

Usage (from the build tree's environment; scripts/python-bench.sh sets it):
    python3 bench/python_view_bench.py [--json FILE]
Needs DSM_DSMD (the dsmd binary) and the package on PYTHONPATH. Starts a
private dsmd and one writer process (tests/python/py_writer.py) per size.
"""
import argparse
import json
import os
import socket as socketlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import libdsm

HERE = os.path.dirname(os.path.abspath(__file__))
WRITER = os.path.join(HERE, "..", "tests", "python", "py_writer.py")
SIZES_MIB = (1, 16, 64)
REPEATS = 200  # per measurement; medians reported


def start_dsmd(binary, directory):
    sock = os.path.join(directory, "dsmd.sock")
    proc = subprocess.Popen([binary, "--socket", sock, "--backing", "memfd", "--region-size",
                             "1G", "--log-level", "warn"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"dsmd exited with {proc.returncode}")
        try:
            with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_SEQPACKET) as s:
                s.connect(sock)
            return proc, sock
        except OSError:
            time.sleep(0.01)
    proc.kill()
    sys.exit("dsmd did not accept connections within 10 s")


def start_writer(name, floats):
    w = subprocess.Popen([sys.executable, WRITER, name, str(floats), "float32", "log", "0"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = w.stdout.readline()
    if not line.startswith("ready"):
        sys.exit(f"writer for {name} did not start: {line!r}")
    w.stdin.write("set 1\n")
    w.stdin.flush()
    if not w.stdout.readline().startswith("version"):
        sys.exit(f"writer for {name} did not publish")
    return w


def median_us(fn, repeats=REPEATS):
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    dsmd = os.environ.get("DSM_DSMD")
    if not dsmd:
        sys.exit("set DSM_DSMD to the dsmd binary (e.g. build/daemon/dsmd)")
    with tempfile.TemporaryDirectory(prefix="dsm-pybench-") as d:
        proc, sock = start_dsmd(dsmd, d)
        os.environ["DSM_SOCKET"] = sock
        writers = []
        rows = []
        try:
            s = libdsm.Session()
            try:
                import torch  # noqa: F401 (the tensor column needs it)
                have_torch = True
            except ImportError:
                have_torch = False
            for mib in SIZES_MIB:
                name = f"pybench/{mib}"
                floats = mib * 1024 * 1024 // 4
                writers.append(start_writer(name, floats))
                t0 = time.perf_counter_ns()
                r = s.attach(name, (floats,), np.float32, timeout=10)
                attach_us = (time.perf_counter_ns() - t0) / 1000
                row = {
                    "mib": mib,
                    "attach_us": attach_us,
                    "array_us": median_us(lambda: r.array),
                    "asarray_view_us": median_us(lambda: np.asarray(r.array)[: floats // 2]),
                    "copy_us": median_us(lambda: r.array.copy(), repeats=20),
                }
                if have_torch:
                    row["tensor_view_us"] = median_us(lambda: r.tensor(copy=False))
                assert float(r.array[floats - 1]) == 1.0, "the reader does not see version 1"
                rows.append(row)
                r.close()
            s.close()
        finally:
            for w in writers:
                w.stdin.close()
                w.wait(timeout=10)
            proc.terminate()
            proc.wait(timeout=10)
    cols = ["mib", "attach_us", "array_us", "asarray_view_us", "tensor_view_us", "copy_us"]
    print(" ".join(f"{c:>16}" for c in cols))
    for row in rows:
        print(" ".join(f"{row.get(c, float('nan')):>16.2f}" if c != "mib" else f"{row[c]:>16}"
                       for c in cols))
    print("array/tensor: median of the Python call that yields the view; copy: ndarray.copy() "
          "of the same bytes; attach: the first attach, once")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
