#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and trains a
# 784-1024-1024-10 MLP on Fashion-MNIST by data-parallel SGD with its parameters
# in libdsm areas: first on 1 host, then on a 3-host virtual cluster (network
# namespaces, one dsmd per host, joined by DPDK memif links), with a progress line per
# epoch (loss, accuracy, versions/s, staleness, throughput). Everything is torn
# down at the end, also when interrupted (Ctrl-C, SIGTERM). Results go to
# results/demo/: summary.json (both runs, and 3 hosts against 1), accuracy.png
# (test accuracy against wall time), and each run's logs and JSON summaries.
#
#   scripts/demo.sh [--epochs N] [--model mlp|softmax] [--quick] [--no-build]
#                   [--device memif|af_packet] [--out DIR] [--dir DIR]
#
#   --epochs N   passes over the training set per run (default 2)
#   --quick      the shortest form (for CI): 1 epoch of 120 steps per worker
#   --no-build   skip scripts/setup.sh and scripts/build.sh (binaries in $BUILD_DIR)
#   --device D   the virtual wire (default memif: shared-memory links between the
#                daemons, the fastest one machine has; af_packet: veth pairs on a
#                bridge with multicast, the kernel's network path)
#   --out DIR    results directory (default results/demo)
#   --dir DIR    the virtual cluster's state dir (default /run/dsm/demo)
set -euo pipefail
cd "$(dirname "$0")/.."

prog=demo.sh
die() { echo "$prog: $*" >&2; exit 2; }

EPOCHS=2
MODEL=mlp
QUICK=0
BUILD=1
OUT=results/demo
DIR=/run/dsm/demo
DEVICE=memif
while (($#)); do
  case $1 in
    --epochs) (($# >= 2)) || die "--epochs needs a value"; EPOCHS=$2; shift 2 ;;
    --model) (($# >= 2)) || die "--model needs a value"; MODEL=$2; shift 2 ;;
    --quick) QUICK=1; EPOCHS=1; shift ;;
    --no-build) BUILD=0; shift ;;
    --device) (($# >= 2)) || die "--device needs a value"; DEVICE=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a directory"; OUT=$2; shift 2 ;;
    --dir) (($# >= 2)) || die "--dir needs a directory"; DIR=$2; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
if [[ $EUID -ne 0 ]]; then
  echo "$prog needs root (it builds network namespaces and installs packages): sudo $0" >&2
  exit 1
fi

export BUILD_DIR=${BUILD_DIR:-build}
build_dir=$BUILD_DIR
[[ $build_dir == /* ]] || build_dir=$PWD/$build_dir
SUMMARY_BIN=${DEMO_SUMMARY:-$build_dir/examples/demo_summary}

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
[[ -x $SUMMARY_BIN ]] || die "$SUMMARY_BIN not found: build first (scripts/build.sh)"

# Worker 0 evaluates the test set a few times per epoch for the accuracy curve.
prog_args=(--evals-per-epoch 4)
((QUICK == 0)) || prog_args=(--evals-per-epoch 3 --steps-per-epoch 120)

rm -rf "$OUT"
mkdir -p "$OUT"
for hosts in 1 3; do
  echo "== Fashion-MNIST, $MODEL, $EPOCHS epoch(s), $hosts host(s)"
  scripts/train.sh --hosts "$hosts" --epochs "$EPOCHS" --model "$MODEL" \
    --device "$DEVICE" --out "$OUT/hosts$hosts" --dir "$DIR" -- "${prog_args[@]}" &
  child=$!
  rc=0
  wait "$child" || rc=$?
  child=
  ((rc == 0)) || { echo "$prog: the $hosts-host run failed (logs in $OUT/hosts$hosts)" >&2; exit "$rc"; }
done

echo "== summary ($OUT/summary.json, plot $OUT/accuracy.png)"
"$SUMMARY_BIN" --out "$OUT/summary.json" --plot "$OUT/accuracy.gp" --png "$OUT/accuracy.png" \
  "$OUT/hosts1" "$OUT/hosts3"
gnuplot "$OUT/accuracy.gp"
