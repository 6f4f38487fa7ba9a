#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, brings up a
# 3-host virtual cluster (network namespaces, one dsmd per host on DPDK
# af_packet), trains the regression sample on host 1 with its weights in a
# libdsm area, follows the training from hosts 2 and 3 (they attach the weights
# by name and evaluate each version that reaches them), prints what each
# daemon saw, and tears everything down, also when interrupted.
#
#   scripts/demo.sh [--steps N] [--hosts N] [--mtu BYTES]
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=300000
HOSTS=3
MTU=1500
while (($#)); do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --mtu) MTU=$2; shift 2 ;;
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

DIR=/run/dsm/demo
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/cluster.sh down --dir "$DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== bringing up a virtual cluster of $HOSTS hosts (MTU $MTU)"
scripts/cluster.sh up "$HOSTS" --dir "$DIR" --mtu "$MTU"

echo "== host 1 trains; hosts 2..$HOSTS follow the weights as versions arrive"
for h in $(seq 2 "$HOSTS"); do
  scripts/cluster.sh exec "$h" --dir "$DIR" -- build/examples/sample_regression follow --versions 400 \
    | sed "s/^/[host $h] /" &
  pids+=($!)
done
scripts/cluster.sh exec 1 --dir "$DIR" -- build/examples/sample_regression train --steps "$STEPS" \
  | sed 's/^/[host 1] /' &
trainer=$!
pids+=("$trainer")
# Followers stop after their versions; the trainer keeps its area alive until then.
for p in "${pids[@]}"; do
  [[ $p == "$trainer" ]] || wait "$p"
done
echo "== what each daemon saw (dsmctl)"
for h in $(seq 1 "$HOSTS"); do
  build/daemon/dsmctl --socket "$DIR/h$h.sock" areas | sed "s/^/[host $h] /"
done
wait "$trainer"
pids=()
echo "== done; tearing the cluster down"
