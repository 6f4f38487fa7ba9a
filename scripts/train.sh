#!/usr/bin/env bash
# Fashion-MNIST data-parallel training on a virtual cluster: brings up N hosts
# (scripts/cluster.sh), runs one worker per host, prints their progress lines,
# and tears the cluster down on exit (also on Ctrl-C or an error). N=1 is the
# single-host baseline of the same code. The worker is one of (--impl):
#   cpp     build/examples/fashion_mnist, the C++ example on libdsm (default)
#   python  examples/python/train_dsm.py, the same algorithm in PyTorch on libdsm
#   ddp     examples/python/train_ddp.py, PyTorch DDP over gloo: the hosts get
#           kernel addresses on veth pairs and a bridge (no dsmd); with --hosts 1
#           it is plain PyTorch in one process and no cluster is brought up
#
#   scripts/train.sh --hosts 3 [--impl cpp|python|ddp] [--epochs 2] [--model mlp|softmax]
#                    [--batch B] [--lr LR] [--staleness S] [--seed N] [--json FILE]
#                    [--out DIR] [--mtu BYTES] [--device af_packet|memif|tap]
#                    [--dir DIR] [-- more program options]
#
# Needs root (network namespaces), a build (scripts/build.sh or ninja -C build) and the
# data (apt-get install dataset-fashion-mnist). See examples/fashion_mnist/README.md
# and examples/python/README.md.
set -euo pipefail

prog=train.sh
# shellcheck source=scripts/lib/cluster_job.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_job.sh"
build_dir=${BUILD_DIR:-build}
[[ $build_dir == /* ]] || build_dir=$repo_root/$build_dir
BIN=${FASHION_MNIST:-$build_dir/examples/fashion_mnist}
DSMCTL=${DSMCTL:-$build_dir/daemon/dsmctl}
# Debian's interpreter: the one the libdsm package is built for and that sees
# python3-torch, whatever python3 comes first on PATH.
PYTHON=${PYTHON:-/usr/bin/python3}
export DSMD=${DSMD:-$build_dir/daemon/dsmd}  # for cluster.sh
readonly DDP_PORT=29500   # rank 0's gloo rendezvous, inside the cluster's namespaces

usage() {
  cat <<EOF
usage: $0 --hosts N [options] [-- program options...]

  --hosts N        hosts in the virtual cluster, one worker each (1 = single-host baseline)
  --impl I         cpp (the C++ example, default), python (PyTorch on libdsm) or ddp
                   (PyTorch DDP over gloo on kernel TCP; --hosts 1: one plain process)
  --epochs E       passes over the training set (default 2 for mlp, 5 for softmax)
  --model M        mlp (784-1024-1024-10) or softmax (default mlp; python and ddp: mlp only)
  --batch B        minibatch per worker and step (default: the program's, 64)
  --lr LR          peak learning rate (default: the program's, 0.1)
  --staleness S    SSP bound in versions (default: the program's, 3; not for ddp)
  --seed N         initial weights and data order (default: the program's, 1)
  --json FILE      worker 0's summary (accuracy per epoch vs wall time, time split)
  --out DIR        keep every worker's log and JSON summary here (worker<K>.log/.json)
                   and the daemons' CPU use and bytes sent (daemons.json)
  --mtu BYTES      cluster MTU (default 9000: a 7 MiB update is ~830 frames, not ~5000)
  --device D       the hosts' DPDK device (cluster.sh up --device; default af_packet: veth
                   pairs on a bridge, multicast; memif: shared-memory links between the
                   daemons, the fastest wire one machine has). One host uses no wire;
                   ddp always uses the kernel's TCP over veth pairs.
  --dir DIR        cluster state dir (default /run/dsm/train)
  --no-hugepages   leave the daemons' backing on 4 KiB pages (default: cluster.sh up
                   --hugepages reserves 2 MiB pages for it while the job runs, as a
                   production host would; readers remap their views every version, and
                   on 4 KiB pages a 3-host memif step took about 1.8x as long here)

Environment: BUILD_DIR (default build), FASHION_MNIST (the binary, default
\$BUILD_DIR/examples/fashion_mnist), DSMD (default \$BUILD_DIR/daemon/dsmd), DSMCTL,
PYTHON (default /usr/bin/python3) and cluster.sh's DSM_START_TIMEOUT.
EOF
}

hosts=
impl=cpp
epochs=
model=mlp
mtu=9000
device=af_packet
dir=/run/dsm/train
hugepages=(--hugepages)
json=
out=
prog_args=()
while (($#)); do
  case $1 in
    --hosts) (($# >= 2)) || die "--hosts needs a value"; hosts=$2; shift 2 ;;
    --impl) (($# >= 2)) || die "--impl needs a value"; impl=$2; shift 2 ;;
    --epochs) (($# >= 2)) || die "--epochs needs a value"; epochs=$2; shift 2 ;;
    --model) (($# >= 2)) || die "--model needs a value"; model=$2; shift 2 ;;
    --batch | --lr | --seed)
      (($# >= 2)) || die "$1 needs a value"; prog_args+=("$1" "$2"); shift 2 ;;
    --staleness)
      (($# >= 2)) || die "$1 needs a value"; staleness=$2; shift 2 ;;
    --json) (($# >= 2)) || die "--json needs a file"; json=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
    --mtu) (($# >= 2)) || die "--mtu needs a value"; mtu=$2; shift 2 ;;
    --device) (($# >= 2)) || die "--device needs a value"; device=$2; shift 2 ;;
    --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
    --no-hugepages) hugepages=(); shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; prog_args+=("$@"); break ;;
    *) die "unknown argument '$1' (see --help; program options go after --)" ;;
  esac
done
[[ -n $hosts ]] || die "how many hosts? usage: $0 --hosts N [options] (see --help)"
hosts=$(job_host_count "$hosts")
[[ $model == mlp || $model == softmax ]] || die "--model must be mlp or softmax, not '$model'"
case $impl in
  cpp | python) ;;
  ddp) [[ -z ${staleness:-} ]] || die "--impl ddp is synchronous: it takes no --staleness" ;;
  *) die "--impl must be cpp, python or ddp, not '$impl'" ;;
esac
[[ $impl == cpp || $model == mlp ]] || die "--impl $impl trains the mlp only"
[[ -z ${staleness:-} ]] || prog_args+=(--staleness "$staleness")
# Softmax regression epochs take a fraction of a second: it gets more of them.
if [[ -z $epochs ]]; then
  if [[ $model == softmax ]]; then epochs=5; else epochs=2; fi
fi
if ! [[ $epochs =~ ^[0-9]+$ ]] || ((10#$epochs < 1)); then
  die "--epochs must be a positive number, not '$epochs'"
fi
job_require_root
case $impl in
  cpp) [[ -x $BIN ]] || die "$BIN not found; build it first: ninja -C build examples/fashion_mnist" ;;
  python)
    [[ -f $build_dir/python/libdsm/__init__.py ]] \
      || die "the libdsm Python package is not in $build_dir/python; build it (scripts/build.sh)" ;;
esac
if [[ $impl != cpp ]]; then
  "$PYTHON" -c "import torch, numpy" 2>/dev/null \
    || die "$PYTHON cannot import torch and numpy: apt-get install python3-torch python3-numpy"
fi

[[ -z $json ]] || json=$(realpath -m -- "$json")
job_logs_dir train
# What carries the traffic between hosts, as daemons.json reports it. One host
# has no peer: its dsmd's port (af_packet, since memif needs a peer) stays idle.
wire=$device
if ((hosts == 1)); then
  wire=none
  [[ $device != memif ]] || device=af_packet
elif [[ $impl == ddp ]]; then
  wire=tcp-veth
fi
daemons=1
if [[ $impl == ddp ]]; then
  daemons=0
  # gloo speaks TCP through the kernel: veth pairs on the bridge with addresses
  # on them (memif links exist only between DPDK processes), and no dsmd.
  if ((hosts > 1)); then
    job_cluster_up "$hosts" --mtu "$mtu" --device af_packet --no-daemons
    for ((h = 1; h <= hosts; h++)); do
      "$CLUSTER" exec "$h" --dir "$dir" -- ip addr add "198.18.0.$h/24" dev dsm0 \
        || die "cannot give host $h its address"
    done
  else
    trap job_cleanup EXIT  # no cluster; the worker is still stopped on Ctrl-C
    trap 'exit 130' INT
    trap 'exit 143' TERM
  fi
else
  job_cluster_up "$hosts" --mtu "$mtu" --device "$device" "${hugepages[@]}"
fi

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
# Bytes host $1's dsmd sent on its DPDK ports (dsmctl counters: every frame,
# headers, acks and heartbeats included).
daemon_tx_bytes() {
  local n
  n=$("$CLUSTER" exec "$1" --dir "$dir" -- "$DSMCTL" --json counters 2>/dev/null \
    | grep -o '"tx_bytes": *[0-9]*' | head -n1 | grep -o '[0-9]*$' || true)
  echo "${n:-0}"
}
# The whole machine's busy CPU time (user, nice, system, irq, softirq; clock ticks):
# the workers and daemons are not always alone on it.
machine_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }
declare -a ticks0=() tx0=()
if ((daemons)); then
  for ((h = 1; h <= hosts; h++)); do
    ticks0[h]=$(daemon_ticks "$h")
    tx0[h]=$(daemon_tx_bytes "$h")
  done
fi
machine0=$(machine_ticks)

echo "$prog: training $model ($impl) for $epochs epoch(s) on $hosts worker(s)"
start_ns=$(date +%s%N)
# One thread for torch and its BLAS, as OpenBLAS runs in the C++ example.
py_env=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
  "PYTHONPATH=$build_dir/python${PYTHONPATH:+:$PYTHONPATH}")
for ((k = 0; k < hosts; k++)); do
  h=$((k + 1))
  wjson=$logs/worker$k.json
  [[ $k -ne 0 || -z $json ]] || wjson=$json
  common=(--epochs "$epochs" --workers "$hosts" --rank "$k" --json "$wjson")
  case $impl in
    cpp)
      # OpenBLAS threads: 1, the workers and daemons share the machine's cores.
      cmd=(env OPENBLAS_NUM_THREADS=1 "$BIN" --model "$model" "${common[@]}") ;;
    python) cmd=("${py_env[@]}" "$PYTHON" "$repo_root/examples/python/train_dsm.py" "${common[@]}") ;;
    ddp)
      cmd=("${py_env[@]}" "$PYTHON" "$repo_root/examples/python/train_ddp.py" "${common[@]}"
        --master-addr 198.18.0.1 --master-port "$DDP_PORT")
      ((hosts == 1)) || cmd+=(--iface dsm0) ;;
  esac
  cmd+=("${prog_args[@]}")
  if [[ $impl == ddp ]] && ((hosts == 1)); then
    # One process, no network: it runs where this script runs.
    (set -o pipefail; "${cmd[@]}" 2>&1 | tee "$logs/worker$k.log") &
    pids+=($!)
    job_log_files+=("$logs/worker$k.log")
  else
    job_start "$h" "$logs/worker$k.log" "" "${cmd[@]}"
  fi
done

failed=0
job_wait_all || failed=1
elapsed_ns=$(($(date +%s%N) - start_ns))
machine_busy=$(($(machine_ticks) - machine0))
[[ -z $json || $failed -ne 0 ]] || echo "$prog: worker 0's summary: $json"

# The daemons' CPU use and bytes sent while the workers ran.
hz=$(getconf CLK_TCK)
busy_cores=$(awk -v t="$machine_busy" -v hz="$hz" -v n="$elapsed_ns" 'BEGIN{printf "%.3f", (t/hz)/(n/1e9)}')
cpu_json="{\"impl\": \"$impl\", \"device\": \"$wire\", \"mtu\": $mtu,"
cpu_json+=" \"wall_s\": $(awk -v n="$elapsed_ns" 'BEGIN{printf "%.3f", n/1e9}'),"
cpu_json+=" \"machine\": {\"cores\": $(nproc), \"busy_cores\": $busy_cores}, \"hosts\": ["
line="$prog: dsmd CPU during training:"
if ((daemons)); then
  for ((h = 1; h <= hosts; h++)); do
    t=$(($(daemon_ticks "$h") - ticks0[h]))
    tx=$(($(daemon_tx_bytes "$h") - tx0[h]))
    s=$(awk -v t="$t" -v hz="$hz" 'BEGIN{printf "%.2f", t/hz}')
    pct=$(awk -v t="$t" -v hz="$hz" -v n="$elapsed_ns" 'BEGIN{printf "%.0f", 100*(t/hz)/(n/1e9)}')
    line+=" host $h ${s}s (${pct}% of a core, sent $(awk -v b="$tx" 'BEGIN{printf "%.1f", b/1048576}') MiB)"
    ((h == 1)) || cpu_json+=", "
    cpu_json+="{\"host\": $h, \"cpu_s\": $s, \"core_fraction\": $(awk -v p="$pct" 'BEGIN{printf "%.2f", p/100}'),"
    cpu_json+=" \"tx_bytes\": $tx}"
  done
else
  line+=" none (no daemons)"
fi
cpu_json+="]}"
echo "$line"
echo "$prog: the machine's $(nproc) cores were busy $busy_cores cores' worth (every process, not only ours)"
[[ -z $out ]] || echo "$cpu_json" >"$out/daemons.json"
exit "$failed"
