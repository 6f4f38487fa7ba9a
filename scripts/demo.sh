#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and trains a
# 784-1024-1024-10 MLP on Fashion-MNIST by data-parallel SGD with its parameters
# in libdsm areas: first on 1 host, then on a 3-host virtual cluster (network
# namespaces, one dsmd per host on DPDK af_packet), with a progress line per
# epoch (loss, accuracy, versions/s, staleness, throughput). Everything is torn
# down at the end, also when interrupted. Results (per-worker logs and JSON
# summaries) go to results/demo/.
#
#   scripts/demo.sh [--epochs N] [--model mlp|softmax]
set -euo pipefail
cd "$(dirname "$0")/.."

EPOCHS=2
MODEL=mlp
while (($#)); do
  case $1 in
    --epochs) EPOCHS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ $EUID -ne 0 ]]; then
  echo "demo.sh needs root (it builds network namespaces and installs packages): sudo $0" >&2
  exit 1
fi

scripts/setup.sh
scripts/build.sh

OUT=results/demo
rm -rf "$OUT"
mkdir -p "$OUT"
for hosts in 1 3; do
  echo "== Fashion-MNIST, $MODEL, $EPOCHS epoch(s), $hosts host(s)"
  scripts/train.sh --hosts "$hosts" --epochs "$EPOCHS" --model "$MODEL" \
    --out "$OUT/hosts$hosts" --json "$OUT/hosts$hosts.json"
done

echo "== summary (worker 0's test accuracy per run; details in $OUT/)"
for hosts in 1 3; do
  f="$OUT/hosts$hosts.json"
  acc=$(grep -o '"final_test_accuracy"[^,}]*' "$f" 2>/dev/null | head -n1 | sed 's/.*://')
  printf '  %d host(s): final test accuracy %s\n' "$hosts" "${acc:-see $f}"
done
