# shellcheck shell=bash
# What the scripts that run one program per host of a virtual cluster share
# (train.sh, mf.sh, samples.sh): checks, a logs directory, bringing the cluster
# up with a teardown that runs on exit, Ctrl-C or SIGTERM (and that a second
# Ctrl-C cannot cut short), and starting/waiting for the per-host programs.
#
# Source it after setting `prog` (the script's name for messages); the caller
# sets `dir` (cluster state dir) and `out` (kept logs dir, or empty) before
# job_logs_dir / job_cluster_up.

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLUSTER=$repo_root/scripts/cluster.sh

die() { echo "$prog: $*" >&2; exit 1; }

# Prints the host count if $1 is a number from 1 to 63, else dies.
job_host_count() {
  [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 63)) \
    || die "--hosts must be a number from 1 to 63, not '$1'"
  echo $((10#$1))
}

job_require_root() {
  ((EUID == 0)) || die "needs root (network namespaces for the virtual cluster); run it with sudo"
}

# Sets `logs`: $out (made absolute and created) if given, else a temporary
# directory removed at exit.
job_logs_dir() {
  if [[ -n $out ]]; then
    out=$(realpath -m -- "$out")
    mkdir -p "$out"
    logs=$out
  else
    logs=$(mktemp -d "/tmp/dsm-$1.XXXXXX")
  fi
}

pids=()
job_log_files=()
job_cluster_started=0

# shellcheck disable=SC2317  # invoked by the traps
job_cleanup() {
  local rc=$?
  # A second Ctrl-C must not cut the teardown short (cluster.sh inherits the
  # ignored signals, so it is not interrupted either).
  trap '' INT TERM
  trap - EXIT
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if ((job_cluster_started)); then
    "$CLUSTER" down --dir "$dir" >/dev/null 2>&1 || echo "$prog: warning: cluster down failed" >&2
  fi
  if [[ -z $out ]]; then rm -rf -- "$logs"; fi
  exit "$rc"
}

# Installs the teardown and brings up $1 hosts in $dir; more arguments go to
# `cluster.sh up`. Its output is kept in $logs/cluster.log.
job_cluster_up() {
  local hosts=$1
  shift
  trap job_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  echo "$prog: bringing up $hosts host(s) in $dir $*"
  job_cluster_started=1
  "$CLUSTER" up "$hosts" --dir "$dir" "$@" >"$logs/cluster.log" 2>&1 \
    || { cat "$logs/cluster.log" >&2; die "the virtual cluster did not come up"; }
}

# job_start HOST LOG LABEL COMMAND...: runs COMMAND in HOST's namespace in the
# background, its output in LOG and on the terminal (prefixed with LABEL if not
# empty). The job's status is COMMAND's (pipefail), not tee's.
job_start() {
  local h=$1 log=$2 label=$3
  shift 3
  if [[ -n $label ]]; then
    (set -o pipefail; "$CLUSTER" exec "$h" --dir "$dir" -- "$@" 2>&1 | tee "$log" \
      | sed "s/^/$label /") &
  else
    (set -o pipefail; "$CLUSTER" exec "$h" --dir "$dir" -- "$@" 2>&1 | tee "$log") &
  fi
  pids+=($!)
  job_log_files+=("$log")
}

# Waits for every started job; returns 1 (naming the logs) if any failed.
job_wait_all() {
  local i failed=0
  for i in "${!pids[@]}"; do
    if ! wait "${pids[i]}"; then
      echo "$prog: a program failed (log: ${job_log_files[i]})" >&2
      failed=1
    fi
  done
  pids=()
  job_log_files=()
  return "$failed"
}
