#!/usr/bin/env bash
# Fashion-MNIST data-parallel training on a virtual cluster: brings up N hosts
# (scripts/cluster.sh), runs one worker of build/examples/fashion_mnist per host,
# prints their progress lines, and tears the cluster down on exit (also on Ctrl-C
# or an error). N=1 is the single-host baseline of the same code.
#
#   scripts/train.sh --hosts 3 [--epochs 2] [--model mlp|softmax] [--batch B] [--lr LR]
#                    [--staleness S] [--seed N] [--json FILE] [--out DIR] [--mtu BYTES]
#                    [--device af_packet|memif|tap]
#                    [--dir DIR] [-- more fashion_mnist options]
#
# Needs root (network namespaces), a build (scripts/build.sh or ninja -C build) and the
# data (apt-get install dataset-fashion-mnist). See examples/fashion_mnist/README.md.
set -euo pipefail

prog=train.sh
# shellcheck source=scripts/lib/cluster_job.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_job.sh"
build_dir=${BUILD_DIR:-build}
[[ $build_dir == /* ]] || build_dir=$repo_root/$build_dir
BIN=${FASHION_MNIST:-$build_dir/examples/fashion_mnist}
export DSMD=${DSMD:-$build_dir/daemon/dsmd}  # for cluster.sh

usage() {
  cat <<EOF
usage: $0 --hosts N [options] [-- fashion_mnist options...]

  --hosts N        hosts in the virtual cluster, one worker each (1 = single-host baseline)
  --epochs E       passes over the training set (default 2 for mlp, 5 for softmax)
  --model M        mlp (784-1024-1024-10) or softmax (default mlp)
  --batch B        minibatch per worker and step (default: the program's, 64)
  --lr LR          peak learning rate (default: the program's, 0.1)
  --staleness S    SSP bound in versions (default: the program's, 3)
  --seed N         initial weights and data order (default: the program's, 1)
  --json FILE      worker 0's summary (accuracy per epoch vs wall time, time split)
  --out DIR        keep every worker's log and JSON summary here (worker<K>.log/.json)
                   and the daemons' CPU use (daemons.json)
  --mtu BYTES      cluster MTU (default 9000: a 7 MiB update is ~830 frames, not ~5000)
  --device D       the hosts' DPDK device (cluster.sh up --device; default af_packet: veth
                   pairs on a bridge, multicast; memif: shared-memory links between the
                   daemons, the fastest wire one machine has)
  --dir DIR        cluster state dir (default /run/dsm/train)

Environment: BUILD_DIR (default build), FASHION_MNIST (the binary, default
\$BUILD_DIR/examples/fashion_mnist), DSMD (default \$BUILD_DIR/daemon/dsmd) and
cluster.sh's DSM_START_TIMEOUT.
EOF
}

hosts=
epochs=
model=mlp
mtu=9000
device=af_packet
dir=/run/dsm/train
json=
out=
prog_args=()
while (($#)); do
  case $1 in
    --hosts) (($# >= 2)) || die "--hosts needs a value"; hosts=$2; shift 2 ;;
    --epochs) (($# >= 2)) || die "--epochs needs a value"; epochs=$2; shift 2 ;;
    --model) (($# >= 2)) || die "--model needs a value"; model=$2; shift 2 ;;
    --batch | --lr | --staleness | --seed)
      (($# >= 2)) || die "$1 needs a value"; prog_args+=("$1" "$2"); shift 2 ;;
    --json) (($# >= 2)) || die "--json needs a file"; json=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
    --mtu) (($# >= 2)) || die "--mtu needs a value"; mtu=$2; shift 2 ;;
    --device) (($# >= 2)) || die "--device needs a value"; device=$2; shift 2 ;;
    --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; prog_args+=("$@"); break ;;
    *) die "unknown argument '$1' (see --help; program options go after --)" ;;
  esac
done
[[ -n $hosts ]] || die "how many hosts? usage: $0 --hosts N [options] (see --help)"
hosts=$(job_host_count "$hosts")
[[ $model == mlp || $model == softmax ]] || die "--model must be mlp or softmax, not '$model'"
# Softmax regression epochs take a fraction of a second: it gets more of them.
if [[ -z $epochs ]]; then
  if [[ $model == softmax ]]; then epochs=5; else epochs=2; fi
fi
if ! [[ $epochs =~ ^[0-9]+$ ]] || ((10#$epochs < 1)); then
  die "--epochs must be a positive number, not '$epochs'"
fi
job_require_root
[[ -x $BIN ]] || die "$BIN not found; build it first: ninja -C build examples/fashion_mnist"

[[ -z $json ]] || json=$(realpath -m -- "$json")
job_logs_dir train
# One host has no peer to link to: memif (point to point) would have no link.
((hosts > 1)) || [[ $device != memif ]] || device=af_packet
job_cluster_up "$hosts" --mtu "$mtu" --device "$device"

# The daemons' CPU time (user + system, clock ticks) from /proc, to report their share.
daemon_ticks() {
  local pid
  pid=$(head -n1 "$dir/h$1.pid" 2>/dev/null | tr -dc '0-9')
  if [[ -n $pid && -r /proc/$pid/stat ]]; then
    awk '{print $14 + $15}' "/proc/$pid/stat"
  else
    echo 0
  fi
}
# The whole machine's busy CPU time (user, nice, system, irq, softirq; clock ticks):
# the workers and daemons are not always alone on it.
machine_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }
declare -a ticks0=()
for ((h = 1; h <= hosts; h++)); do ticks0[h]=$(daemon_ticks "$h"); done
machine0=$(machine_ticks)

echo "$prog: training $model for $epochs epoch(s) on $hosts worker(s)"
start_ns=$(date +%s%N)
for ((k = 0; k < hosts; k++)); do
  h=$((k + 1))
  wjson=$logs/worker$k.json
  [[ $k -ne 0 || -z $json ]] || wjson=$json
  # OpenBLAS threads: 1, the workers and daemons share the machine's cores.
  job_start "$h" "$logs/worker$k.log" "" env OPENBLAS_NUM_THREADS=1 \
    "$BIN" --model "$model" --epochs "$epochs" --workers "$hosts" --rank "$k" \
    --json "$wjson" "${prog_args[@]}"
done

failed=0
job_wait_all || failed=1
elapsed_ns=$(($(date +%s%N) - start_ns))
machine_busy=$(($(machine_ticks) - machine0))
[[ -z $json || $failed -ne 0 ]] || echo "$prog: worker 0's summary: $json"

# The daemons' CPU use while the workers ran.
hz=$(getconf CLK_TCK)
busy_cores=$(awk -v t="$machine_busy" -v hz="$hz" -v n="$elapsed_ns" 'BEGIN{printf "%.3f", (t/hz)/(n/1e9)}')
cpu_json="{\"device\": \"$device\", \"mtu\": $mtu, \"wall_s\": $(awk -v n="$elapsed_ns" 'BEGIN{printf "%.3f", n/1e9}'),"
cpu_json+=" \"machine\": {\"cores\": $(nproc), \"busy_cores\": $busy_cores}, \"hosts\": ["
line="$prog: dsmd CPU during training:"
for ((h = 1; h <= hosts; h++)); do
  t=$(($(daemon_ticks "$h") - ticks0[h]))
  s=$(awk -v t="$t" -v hz="$hz" 'BEGIN{printf "%.2f", t/hz}')
  pct=$(awk -v t="$t" -v hz="$hz" -v n="$elapsed_ns" 'BEGIN{printf "%.0f", 100*(t/hz)/(n/1e9)}')
  line+=" host $h ${s}s (${pct}% of a core)"
  ((h == 1)) || cpu_json+=", "
  cpu_json+="{\"host\": $h, \"cpu_s\": $s, \"core_fraction\": $(awk -v p="$pct" 'BEGIN{printf "%.2f", p/100}')}"
done
cpu_json+="]}"
echo "$line"
echo "$prog: the machine's $(nproc) cores were busy $busy_cores cores' worth (every process, not only ours)"
[[ -z $out ]] || echo "$cpu_json" >"$out/daemons.json"
exit "$failed"
