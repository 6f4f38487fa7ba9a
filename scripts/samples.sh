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
# shellcheck source=scripts/lib/cluster_job.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_job.sh"
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
hosts=$(job_host_count "$hosts")
for v in rounds keys; do
  [[ ${!v} =~ ^[0-9]+$ ]] && ((10#${!v} >= 1)) || die "--$v must be a positive number, not '${!v}'"
done
procs=${procs:-$hosts}
[[ $procs =~ ^[0-9]+$ ]] && ((10#$procs >= 2 && 10#$procs <= 64)) \
  || die "--procs must be a number from 2 to 64, not '$procs'"
job_require_root
for b in sample_barrier sample_hashtable; do
  [[ -x $BIN_DIR/$b ]] || die "$BIN_DIR/$b not found; build it first: ninja -C build examples/samples/$b"
done

job_logs_dir samples
job_cluster_up "$hosts"
failed=0

echo "$prog: barrier, $procs processes, $rounds rounds"
for ((k = 0; k < procs; k++)); do
  job_start "$((k % hosts + 1))" "$logs/barrier$k.log" "[host $((k % hosts + 1))]" \
    "$BIN_DIR/sample_barrier" \
    --workers "$procs" --rank "$k" --rounds "$rounds" --json "$logs/barrier$k.json"
done
job_wait_all || failed=1

echo "$prog: hash table, built on host 1, looked up by $((procs - 1)) process(es)"
job_start 1 "$logs/hashtable-build.log" "[host 1]" "$BIN_DIR/sample_hashtable" build --keys "$keys" \
  --readers "$((procs - 1))" --json "$logs/hashtable.json"
for ((k = 1; k < procs; k++)); do
  job_start "$((k % hosts + 1))" "$logs/hashtable-lookup$k.log" "[host $((k % hosts + 1))]" \
    "$BIN_DIR/sample_hashtable" lookup \
    --keys "$keys" --reader "$((k - 1))"
done
job_wait_all || failed=1
((failed == 0)) || echo "$prog: a sample failed (logs: $logs)" >&2
exit "$failed"
