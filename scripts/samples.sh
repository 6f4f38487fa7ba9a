#!/usr/bin/env bash
# The samples of examples/samples on a virtual cluster: the cross-host barrier
# (P processes) and the hash table (built by one process, looked up by P - 1).
# Process k runs on host (k mod N) + 1, so --hosts 1 puts all of them on one host.
# Tears the cluster down on exit (also on Ctrl-C or an error).
#
#   scripts/samples.sh [--hosts N] [--procs P] [--rounds R] [--keys K] [--out DIR] [--dir DIR]
#
# Needs root (network namespaces) and a build (ninja -C build). See examples/samples/README.md.
set -euo pipefail

prog=samples.sh
die() { echo "$prog: $*" >&2; exit 1; }

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=$repo_root/scripts/cluster.sh
BIN_DIR=${SAMPLES_DIR:-$repo_root/build/examples/samples}

usage() {
  cat <<EOF
usage: $0 [options]

  --hosts N     hosts in the virtual cluster (default 3)
  --procs P     processes per sample (default: N; at least 2)
  --rounds R    barrier rounds (default 1000)
  --keys K      hash table keys (default 20000)
  --out DIR     keep the logs and JSON results here
  --dir DIR     cluster state dir (default /run/dsm/samples)

Environment: SAMPLES_DIR (where sample_barrier and sample_hashtable are, default
build/examples/samples), and cluster.sh's (DSMD, DSM_START_TIMEOUT).
EOF
}

hosts=3
procs=
rounds=1000
keys=20000
out=
dir=/run/dsm/samples
while (($#)); do
  case $1 in
    --hosts) (($# >= 2)) || die "--hosts needs a value"; hosts=$2; shift 2 ;;
    --procs) (($# >= 2)) || die "--procs needs a value"; procs=$2; shift 2 ;;
    --rounds) (($# >= 2)) || die "--rounds needs a value"; rounds=$2; shift 2 ;;
    --keys) (($# >= 2)) || die "--keys needs a value"; keys=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
    --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in hosts rounds keys; do
  [[ ${!v} =~ ^[0-9]+$ ]] && ((10#${!v} >= 1)) || die "--$v must be a positive number, not '${!v}'"
done
((10#$hosts <= 63)) || die "--hosts must be at most 63"
procs=${procs:-$hosts}
[[ $procs =~ ^[0-9]+$ ]] && ((10#$procs >= 2 && 10#$procs <= 64)) \
  || die "--procs must be a number from 2 to 64, not '$procs'"
((EUID == 0)) || die "needs root (network namespaces for the virtual cluster); run it with sudo"
for b in sample_barrier sample_hashtable; do
  [[ -x $BIN_DIR/$b ]] || die "$BIN_DIR/$b not found; build it first: ninja -C build examples/samples/$b"
done

if [[ -n $out ]]; then
  out=$(realpath -m -- "$out")
  mkdir -p "$out"
  logs=$out
else
  logs=$(mktemp -d /tmp/dsm-samples.XXXXXX)
fi

pids=()
cluster_up=0
# shellcheck disable=SC2317  # invoked by the traps
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if ((cluster_up)); then
    "$CLUSTER" down --dir "$dir" >/dev/null 2>&1 || echo "$prog: warning: cluster down failed" >&2
  fi
  if [[ -z $out ]]; then rm -rf -- "$logs"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "$prog: bringing up $hosts host(s) in $dir"
cluster_up=1
"$CLUSTER" up "$hosts" --dir "$dir" >"$logs/cluster.log" 2>&1 \
  || { cat "$logs/cluster.log" >&2; die "the virtual cluster did not come up"; }

# Starts a command on a host in the background, its output prefixed and kept in a log;
# the subshell's status is the command's (pipefail), not tee's.
failed=0
start() {
  local h=$1 log=$2
  shift 2
  (set -o pipefail; "$CLUSTER" exec "$h" --dir "$dir" -- "$@" 2>&1 | sed "s/^/[host $h] /" \
    | tee "$log") &
  pids+=($!)
}
wait_all() {
  local p
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  pids=()
}

echo "$prog: barrier, $procs processes, $rounds rounds"
for ((k = 0; k < procs; k++)); do
  start "$((k % hosts + 1))" "$logs/barrier$k.log" "$BIN_DIR/sample_barrier" \
    --workers "$procs" --rank "$k" --rounds "$rounds" --json "$logs/barrier$k.json"
done
wait_all

echo "$prog: hash table, built on host 1, looked up by $((procs - 1)) process(es)"
start 1 "$logs/hashtable-build.log" "$BIN_DIR/sample_hashtable" build --keys "$keys" \
  --readers "$((procs - 1))" --json "$logs/hashtable.json"
for ((k = 1; k < procs; k++)); do
  start "$((k % hosts + 1))" "$logs/hashtable-lookup$k.log" "$BIN_DIR/sample_hashtable" lookup \
    --keys "$keys" --reader "$((k - 1))"
done
wait_all
((failed == 0)) || echo "$prog: a sample failed (logs: $logs)" >&2
exit "$failed"
