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
# shellcheck source=scripts/lib/cluster_job.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_job.sh"
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
hosts=$(job_host_count "$hosts")
job_require_root
[[ -x $BIN ]] || die "$BIN not found; build it first: ninja -C build examples/matrix_factorization/mf"
[[ -z $json ]] || json=$(realpath -m -- "$json")
job_logs_dir mf
job_cluster_up "$hosts" --mtu "$mtu"

echo "$prog: matrix factorization on $hosts worker(s)"
for ((k = 0; k < hosts; k++)); do
  wjson=$logs/worker$k.json
  [[ $k -ne 0 || -z $json ]] || wjson=$json
  job_start "$((k + 1))" "$logs/worker$k.log" "" \
    "$BIN" --workers "$hosts" --rank "$k" --json "$wjson" "${prog_args[@]}"
done
failed=0
job_wait_all || failed=1
[[ -z $json || $failed -ne 0 ]] || echo "$prog: worker 0's summary: $json"
exit "$failed"
