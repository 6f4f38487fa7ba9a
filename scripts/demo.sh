#!/usr/bin/env bash
# The README's main command. For now (one host): installs what is missing,
# builds, starts a dsmd, runs the regression sample (one trainer writing its
# weights, two followers reading them as versions arrive) and stops the daemon
# again, even when interrupted.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh

STEPS=${STEPS:-3000}
run_dir=$(mktemp -d /tmp/dsm-demo-XXXXXX)
socket="$run_dir/dsmd.sock"
pidfile="$run_dir/dsmd.pid"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ -f "$pidfile" ]]; then
    kill "$(cat "$pidfile")" 2>/dev/null || true
    for _ in $(seq 1 100); do [[ -f "$pidfile" ]] || break; sleep 0.05; done
  fi
  rm -rf "$run_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting dsmd (socket $socket)"
build/daemon/dsmd --socket "$socket" --background --pid-file "$pidfile"
export DSM_SOCKET="$socket"

echo "== two followers attach 'sample/weights' read-only; one trainer writes it"
build/examples/sample_regression follow --versions 200 | sed 's/^/[follower 1] /' &
pids+=($!)
build/examples/sample_regression follow --versions 200 | sed 's/^/[follower 2] /' &
pids+=($!)
sleep 0.2
build/examples/sample_regression train --steps "$STEPS" | sed 's/^/[trainer]    /'
for p in "${pids[@]}"; do wait "$p"; done
pids=()
echo "== done; stopping dsmd"
