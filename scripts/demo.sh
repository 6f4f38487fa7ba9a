#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and trains a
# 784-1024-1024-10 MLP on Fashion-MNIST by data-parallel SGD six ways on the
# same machine, one after the other, and compares them:
#   cpp-1    libdsm, the C++ example (examples/fashion_mnist), 1 host
#   cpp-3    the same on a 3-host virtual cluster (network namespaces, one dsmd
#            per host, joined by DPDK memif links)
#   managed-3  the same with managed sync: each update reaches the other hosts
#            within 42 MB/s (about a fifth of it), largest changes first
#   torch-3  libdsm from PyTorch (examples/python/train_dsm.py), 3 hosts, memif
#   ddp-3    PyTorch DistributedDataParallel over gloo (examples/python/train_ddp.py),
#            3 hosts on veth pairs and a bridge (the kernel's TCP; no dsmd)
#   torch-1  PyTorch in one process, no network
# with a progress line per epoch. Everything is torn down at the end, also when
# interrupted (Ctrl-C, SIGTERM). Results go to results/demo/: summary.json (per
# run: time per step, time to 0.85 test accuracy, final accuracy, bytes on the
# wire per step, the daemons' CPU; the ratios issues 17 and 18 target), accuracy.png
# (test accuracy against wall time) and each run's logs and JSON summaries.
#
#   scripts/demo.sh [--epochs N] [--quick] [--no-build] [--runs LIST]
#                   [--device memif|af_packet] [--out DIR] [--dir DIR]
#
#   --epochs N   passes over the training set per run (default 2)
#   --quick      the shortest form (for CI): 1 epoch of 120 steps per worker
#   --no-build   skip scripts/setup.sh and scripts/build.sh (binaries in $BUILD_DIR)
#   --runs LIST  comma-separated subset of cpp-1,cpp-3,managed-3,torch-3,ddp-3,torch-1
#                (default all)
#   --device D   the libdsm runs' virtual wire (default memif: shared-memory links
#                between the daemons, the fastest one machine has; af_packet: veth
#                pairs on a bridge with multicast, the kernel's network path)
#   --out DIR    results directory (default results/demo)
#   --dir DIR    the virtual cluster's state dir (default /run/dsm/demo)
set -euo pipefail
cd "$(dirname "$0")/.."

prog=demo.sh
die() { echo "$prog: $*" >&2; exit 2; }

ALL_RUNS=cpp-1,cpp-3,managed-3,torch-3,ddp-3,torch-1
EPOCHS=2
QUICK=0
BUILD=1
RUNS=$ALL_RUNS
OUT=results/demo
DIR=/run/dsm/demo
DEVICE=memif
while (($#)); do
  case $1 in
    --epochs) (($# >= 2)) || die "--epochs needs a value"; EPOCHS=$2; shift 2 ;;
    --quick) QUICK=1; EPOCHS=1; shift ;;
    --no-build) BUILD=0; shift ;;
    --runs) (($# >= 2)) || die "--runs needs a list"; RUNS=$2; shift 2 ;;
    --device) (($# >= 2)) || die "--device needs a value"; DEVICE=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a directory"; OUT=$2; shift 2 ;;
    --dir) (($# >= 2)) || die "--dir needs a directory"; DIR=$2; shift 2 ;;
    -h | --help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
IFS=, read -r -a runs <<<"$RUNS"
((${#runs[@]})) || die "--runs is empty"
for r in "${runs[@]}"; do
  [[ ,$ALL_RUNS, == *,"$r",* ]] || die "unknown run '$r' in --runs (of $ALL_RUNS)"
done
if [[ $EUID -ne 0 ]]; then
  echo "$prog needs root (it builds network namespaces and installs packages): sudo $0" >&2
  exit 1
fi

export BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
SUMMARY=${DEMO_SUMMARY:-examples/fashion_mnist/demo_summary.py}

# train.sh runs in the background so that a signal reaches this script at once
# (bash runs traps only between foreground commands); it is then stopped with
# SIGTERM and waited for while it tears its cluster down.
child=
on_signal() {
  trap '' INT TERM
  echo "$prog: interrupted; tearing down" >&2
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

if ((BUILD)); then
  scripts/setup.sh
  scripts/build.sh
fi
command -v gnuplot >/dev/null 2>&1 || die "gnuplot is missing: run scripts/setup.sh"

# Worker 0 evaluates the test set a few times per epoch for the accuracy curve.
prog_args=(--evals-per-epoch 4)
((QUICK == 0)) || prog_args=(--evals-per-epoch 3 --steps-per-epoch 120)

declare -A title=(
  [cpp-1]="libdsm C++" [cpp-3]="libdsm C++" [managed-3]="libdsm C++ managed"
  [torch-3]="libdsm PyTorch" [ddp-3]="PyTorch DDP gloo" [torch-1]="PyTorch, no network")
declare -A impl=([cpp-1]=cpp [cpp-3]=cpp [managed-3]=cpp [torch-3]=python [ddp-3]=ddp
  [torch-1]=ddp)
# Managed sync's budget: about a fifth of the 7.45 MB update at ~28 steps/s (the
# example ranks changes by absolute size: examples/fashion_mnist/README.md).
declare -A run_args=([managed-3]="--managed-mbps 42 --max-line-age 8")

rm -rf "$OUT"
mkdir -p "$OUT"
summary_args=()
for r in "${runs[@]}"; do
  hosts=${r##*-}
  echo "== Fashion-MNIST mlp, $EPOCHS epoch(s): ${title[$r]}, $hosts host(s)"
  read -r -a extra <<<"${run_args[$r]:-}"
  scripts/train.sh --impl "${impl[$r]}" --hosts "$hosts" --epochs "$EPOCHS" \
    --device "$DEVICE" --out "$OUT/$r" --dir "$DIR" -- "${prog_args[@]}" "${extra[@]}" &
  child=$!
  rc=0
  wait "$child" || rc=$?
  child=
  ((rc == 0)) || { echo "$prog: the run $r failed (logs in $OUT/$r)" >&2; exit "$rc"; }
  summary_args+=("${title[$r]}=$OUT/$r")
done

echo "== summary ($OUT/summary.json, plot $OUT/accuracy.png)"
"$PYTHON" "$SUMMARY" --out "$OUT/summary.json" --plot "$OUT/accuracy.gp" \
  --png "$OUT/accuracy.png" "${summary_args[@]}"
gnuplot "$OUT/accuracy.gp"
