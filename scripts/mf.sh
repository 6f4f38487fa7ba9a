#!/usr/bin/env bash
# Matrix factorization (examples/matrix_factorization) on a virtual cluster: brings up
# N hosts (scripts/cluster.sh), runs one worker of build/examples/matrix_factorization/mf
# per host, prints their progress lines and tears the cluster down on exit (also on
# Ctrl-C or an error). N=1 is the single-host baseline of the same code.
#
#   scripts/mf.sh --hosts 3 [--epochs E] [--batch B] [--lr LR] [--staleness S] [--seed N]
#                 [--json FILE] [--out DIR] [--mtu BYTES] [--dir DIR] [-- more mf options]
#
# Needs root (network namespaces) and a build (ninja -C build). See
# examples/matrix_factorization/README.md.
set -euo pipefail

prog=mf.sh
die() { echo "$prog: $*" >&2; exit 1; }

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=$repo_root/scripts/cluster.sh
BIN=${MF:-$repo_root/build/examples/matrix_factorization/mf}

usage() {
  cat <<EOF
usage: $0 --hosts N [options] [-- mf options...]

  --hosts N        hosts in the virtual cluster, one worker each (1 = single-host baseline)
  --epochs E       passes over the ratings (default: the program's, 10)
  --batch B        ratings per step and version (default: the program's, 256)
  --lr LR          SGD step size (default: the program's)
  --staleness S    SSP bound in versions (default: the program's, 3)
  --seed N         data, initial factors and order (default: the program's, 1)
  --json FILE      worker 0's summary (RMSE per epoch, versions/s, lines logged, time split)
  --out DIR        keep every worker's log and JSON summary here (worker<K>.log/.json)
  --mtu BYTES      cluster MTU (default 1500: a version is a few KiB)
  --dir DIR        cluster state dir (default /run/dsm/mf)

Environment: MF (the binary, default build/examples/matrix_factorization/mf), and
cluster.sh's (DSMD, DSM_START_TIMEOUT).
EOF
}

hosts=
mtu=1500
dir=/run/dsm/mf
json=
out=
prog_args=()
while (($#)); do
  case $1 in
    --hosts) (($# >= 2)) || die "--hosts needs a value"; hosts=$2; shift 2 ;;
    --epochs | --batch | --lr | --staleness | --seed)
      (($# >= 2)) || die "$1 needs a value"; prog_args+=("$1" "$2"); shift 2 ;;
    --json) (($# >= 2)) || die "--json needs a file"; json=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
    --mtu) (($# >= 2)) || die "--mtu needs a value"; mtu=$2; shift 2 ;;
    --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; prog_args+=("$@"); break ;;
    *) die "unknown argument '$1' (see --help; program options go after --)" ;;
  esac
done
[[ -n $hosts ]] || die "how many hosts? usage: $0 --hosts N [options] (see --help)"
if ! [[ $hosts =~ ^[0-9]+$ ]] || ((10#$hosts < 1 || 10#$hosts > 63)); then
  die "--hosts must be a number from 1 to 63, not '$hosts'"
fi
hosts=$((10#$hosts))
((EUID == 0)) || die "needs root (network namespaces for the virtual cluster); run it with sudo"
[[ -x $BIN ]] || die "$BIN not found; build it first: ninja -C build examples/matrix_factorization/mf"

[[ -z $json ]] || json=$(realpath -m -- "$json")
if [[ -n $out ]]; then
  out=$(realpath -m -- "$out")
  mkdir -p "$out"
  logs=$out
else
  logs=$(mktemp -d /tmp/dsm-mf.XXXXXX)
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

echo "$prog: bringing up $hosts host(s) in $dir (MTU $mtu)"
cluster_up=1
"$CLUSTER" up "$hosts" --dir "$dir" --mtu "$mtu" >"$logs/cluster.log" 2>&1 \
  || { cat "$logs/cluster.log" >&2; die "the virtual cluster did not come up"; }

echo "$prog: matrix factorization on $hosts worker(s)"
for ((k = 0; k < hosts; k++)); do
  wjson=$logs/worker$k.json
  [[ $k -ne 0 || -z $json ]] || wjson=$json
  "$CLUSTER" exec "$((k + 1))" --dir "$dir" -- \
    "$BIN" --workers "$hosts" --rank "$k" --json "$wjson" "${prog_args[@]}" 2>&1 \
    | tee "$logs/worker$k.log" &
  pids+=($!)
done

failed=0
for k in "${!pids[@]}"; do
  if ! wait "${pids[k]}"; then
    echo "$prog: worker $k failed (log: $logs/worker$k.log)" >&2
    failed=1
  fi
done
pids=()
[[ -z $json || $failed -ne 0 ]] || echo "$prog: worker 0's summary: $json"
exit "$failed"
