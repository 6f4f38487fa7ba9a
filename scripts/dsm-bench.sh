#!/usr/bin/env bash
# End-to-end replication benchmark on the virtual cluster (scripts/cluster.sh):
# for each configuration (device, MTU, R readers) it brings up R+1 hosts, first
# measures the raw frame throughput of that device between host 1 and host 2
# (bench/raw_throughput, no dsmd running; for R > 1 also multicast to every
# reader host) and the TCP fan-out a user would write instead (bench/tcp-fanout,
# the same workload over the kernel's TCP between the same namespaces; memif
# namespaces have no kernel link, so for them an af_packet cluster of the same
# size and MTU), then starts the daemons and runs bench/dsm-bench with a writer
# on host 1 and a reader on each of hosts 2..R+1, at f = 100% and f = 1% of the
# area's lines changed per round. Prints one table and writes
# results/bench/dsm-bench.json.
#
#   scripts/dsm-bench.sh [--quick] [--size BYTES] [--seconds S] [--configs LIST] [options]
#
#   --quick          8 MiB area, 2 s per run, only af_packet MTU 1500 with R = 1 and 3 (~1-2 min)
#   --size BYTES     area size (suffix K/M/G; default 64M)
#   --seconds S      measured time per run (default 8; rounds stop starting after it)
#   --raw-seconds S  raw reference duration (default 3)
#   --fractions LIST comma-separated fractions of lines changed per round (default 1.0,0.01)
#   --configs LIST   comma-separated device:mtu:readers, device af_packet, af_xdp (MTU 1500),
#                    memif or tap (default:
#                    af_packet:1500:1,af_packet:1500:3,af_packet:9000:1,af_packet:9000:3,af_xdp:1500:1,memif:1500:1,
#                    memif:9000:1,memif:1500:3,memif:9000:3)
#   --window W       a round starts when every reader sees the version W rounds back (default 2)
#   --buffers B      reader buffers per host (default 2; 3 lets a writer publish two versions
#                    ahead of what dsmd ships without waiting for its pinned buffer)
#   --gap-ms MS      the writer pauses this long before each round (default 0), so the
#                    daemons go idle between versions as between training steps
#   --out FILE       combined JSON (default results/bench/dsm-bench.json)
#   --build DIR      meson build directory (default build)
#   --no-build       use the binaries as they are
#   --keep           keep the work dir (logs, per-run JSON) and print its path
#   --dsmd-args ARGS extra dsmd arguments, space-separated (e.g. "--no-doorbell")
#   --loss LIST      comma-separated shares of frames every dsmd drops (--fault-drop), each
#                    a run of every configuration and fraction (default 0); the table then
#                    gives time to the first version and goodput as ratios to the 0 run
#   --auth LIST      comma-separated off/on, each a run of every configuration, loss and
#                    fraction (default off); on: the cluster authenticates frames with a key
#                    file (AES-256-GMAC); the table then gives rounds/s keyed as a ratio to
#                    the runs without a key (medians: repeat, e.g. off,on,off,on)
#   --no-tcp         skip the TCP fan-out reference
#   --tcp-snapshots  also run the TCP fan-out with readers that keep versions atomic as
#                    libdsm's do (tcp-fanout reader --snapshots): what that guarantee costs
#   --managed M[:A]  the area is managed (dsm_alloc_managed, ranked by absolute change): each
#                    reader host is sent at most M MB/s of changed lines, none lagging more
#                    than A versions (default 8); lines hold floats that move a little. The
#                    table then adds wire bytes per changed byte, the oldest lag and the
#                    time from the last change until every replica holds every line
#   --no-hugepages   leave the daemons' backing on 4 KiB pages (default: cluster.sh up
#                    --hugepages reserves 2 MiB pages for it, as a production host would)
#
# memif links exactly two processes: the cluster is a full mesh of links, each
# dsmd one port per peer, and a version goes to R readers as R copies (framed
# once, copied to each link); its raw reference is one link (h1 -> h2), with no
# multicast rate.
# Needs root (network namespaces). Everything it starts is stopped and every
# cluster it brings up is taken down on exit, also on failure or Ctrl-C.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build
OUT=$ROOT/results/bench/dsm-bench.json
SIZE=64M
SECONDS_PER_RUN=8
RAW_SECONDS=3
FRACTIONS=1.0,0.01
CONFIGS=af_packet:1500:1,af_packet:1500:3,af_packet:9000:1,af_packet:9000:3,af_xdp:1500:1,memif:1500:1,memif:9000:1,memif:1500:3,memif:9000:3
WINDOW=2
BUFFERS=2
GAP_MS=0
ROUNDS=20000
DO_BUILD=1
KEEP=0
DSMD_ARGS=()
HUGEPAGES=(--hugepages)
LOSSES=0
AUTHS=off
DO_TCP=1
TCP_SNAPSHOTS=0
MANAGED_ARGS=()
MANAGED_LABEL=""
prog=dsm-bench.sh

die() { echo "$prog: $*" >&2; exit 1; }
note() { echo "$prog: $*"; }
usage() { sed -n '2,49p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

# --quick sets defaults; options given explicitly override them wherever they stand.
for a in "$@"; do
  if [[ $a == --quick ]]; then
    SIZE=8M
    SECONDS_PER_RUN=2
    RAW_SECONDS=2
    CONFIGS=af_packet:1500:1,af_packet:1500:3
  fi
done
while (($#)); do
  case $1 in
    --quick) shift ;;
    --size) SIZE=${2:?--size needs a value}; shift 2 ;;
    --seconds) SECONDS_PER_RUN=${2:?--seconds needs a value}; shift 2 ;;
    --raw-seconds) RAW_SECONDS=${2:?--raw-seconds needs a value}; shift 2 ;;
    --fractions) FRACTIONS=${2:?--fractions needs a value}; shift 2 ;;
    --configs) CONFIGS=${2:?--configs needs a value}; shift 2 ;;
    --window) WINDOW=${2:?--window needs a value}; shift 2 ;;
    --buffers) BUFFERS=${2:?--buffers needs a value}; shift 2 ;;
    --gap-ms) GAP_MS=${2:?--gap-ms needs a value}; shift 2 ;;
    --out) OUT=${2:?--out needs a file}; shift 2 ;;
    --build) BUILD=${2:?--build needs a directory}; shift 2 ;;
    --no-build) DO_BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    --no-hugepages) HUGEPAGES=(); shift ;;
    --dsmd-args) read -r -a DSMD_ARGS <<<"${2?--dsmd-args needs a value}"; shift 2 ;;
    --loss) LOSSES=${2:?--loss needs a value}; shift 2 ;;
    --auth) AUTHS=${2:?--auth needs a value}; shift 2 ;;
    --no-tcp) DO_TCP=0; shift ;;
    --tcp-snapshots) TCP_SNAPSHOTS=1; shift ;;
    --managed)
      m=${2:?--managed needs MBPS[:AGE]}
      [[ $m =~ ^[0-9]+(\.[0-9]+)?(:[0-9]+)?$ ]] || die "--managed takes MBPS[:AGE], e.g. 45:8, not '$m'"
      MANAGED_ARGS=(--managed-mbps "${m%%:*}")
      [[ $m != *:* ]] || MANAGED_ARGS+=(--max-line-age "${m##*:}")
      MANAGED_LABEL=" managed"
      shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "$prog: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

if [[ $EUID -ne 0 ]]; then
  die "needs root: the virtual cluster uses network namespaces and veth pairs; run it with sudo"
fi

CLUSTER=$ROOT/scripts/cluster.sh
DSMD=$BUILD/daemon/dsmd
DSMCTL=$BUILD/daemon/dsmctl
RAW=$BUILD/bench/raw_throughput
BENCH=$BUILD/bench/dsm-bench
TCP=$BUILD/bench/tcp-fanout
export DSMD

if ((DO_BUILD)); then
  if ! ninja -C "$BUILD" daemon/dsmd daemon/dsmctl bench/raw_throughput bench/dsm-bench bench/tcp-fanout >/dev/null 2>&1; then
    # Other work in the tree may break unrelated targets for a moment: build ours one by one.
    for t in daemon/dsmd daemon/dsmctl bench/raw_throughput bench/dsm-bench bench/tcp-fanout; do
      ninja -C "$BUILD" "$t" >/dev/null 2>&1 || echo "$prog: warning: building $t failed; using the existing binary" >&2
    done
  fi
fi
for b in "$DSMD" "$DSMCTL" "$RAW" "$BENCH" "$TCP"; do
  [[ -x $b ]] || die "$b is missing; build it: ninja -C $BUILD ${b#"$BUILD"/}"
done

# ---------------------------------------------------------------------------
# Cleanup: our background processes by pid, the cluster that is up, the work dir.

WORK=$(mktemp -d /tmp/dsmbench.XXXXXX)
CUR_DIR=""   # state dir of the cluster that is up
CUR_TCP_DIR=""  # and of the TCP reference's, for memif
BG_PIDS=()

cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  if [[ -n $CUR_TCP_DIR ]]; then
    "$CLUSTER" down --dir "$CUR_TCP_DIR" >/dev/null 2>&1 || true
  fi
  if [[ -n $CUR_DIR ]]; then
    "$CLUSTER" down --dir "$CUR_DIR" >/dev/null 2>&1 || echo "$prog: warning: could not take down $CUR_DIR" >&2
    CUR_DIR=""
  fi
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if ((KEEP)); then
    echo "$prog: work dir kept: $WORK"
  else
    rm -rf -- "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "$prog: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

# Waits for the background pids given, at most $1 seconds; kills what is left.
wait_bounded() {
  local limit=$1 p i
  shift
  for ((i = 0; i < limit * 10; i++)); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "$@"; do
    if kill -0 "$p" 2>/dev/null; then
      echo "$prog: warning: pid $p still running after ${limit}s; stopping it" >&2
      kill -TERM "$p" 2>/dev/null || true
    fi
    wait "$p" 2>/dev/null || true
  done
}

# device string of host H from the cluster file; with point-to-point links
# (memif), that of its link to host P
device_of() {
  awk -v h="$2" -v p="${3:-}" '
    /^\[\[host\]\]/ { id = ""; link = 0 }
    /^\[\[host\.link\]\]/ { link = 1; peer = "" }
    /^id = / { id = $3 }
    /^peer = / { peer = $3 }
    /^device = / && id == h && (link ? peer == p : 1) {
      d = $0; sub(/^device = "/, "", d); sub(/"$/, "", d); print d; exit
    }
  ' "$1/cluster.toml"
}

# Stops the daemons of hosts 1..N of the cluster in $1 (SIGTERM, then bounded
# waits), so that they can be started again with other arguments.
stop_daemons() {
  local dir=$1 n=$2 h pid i
  for ((h = 1; h <= n; h++)); do
    pid=$(cat "$dir/h$h.pid" 2>/dev/null || true)
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || continue
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && die "dsmd on host $h (pid $pid) did not stop within 10 s"
  done
  return 0
}

# Frames authenticated (on: a fresh key file the cluster file names) or not
# (off), for the daemons started next.
set_auth() {
  local dir=$1 auth=$2
  sed -i '/^key_file = /d' "$dir/cluster.toml"
  if [[ $auth == on ]]; then
    (umask 077 && printf '[[key]]\nid = 1\nsecret = "%s"\n' \
      "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$dir/cluster.key")
    sed -i 's/^\[cluster\]$/[cluster]\nkey_file = "cluster.key"/' "$dir/cluster.toml"
  fi
}

state_of() { sed -n "s/^$2=//p" "$1/.cluster-state" | head -n1; }
host_mac() { printf '02:00:c6:12:00:%02x\n' "$1"; }
host_ip() { printf '198.18.0.%d\n' "$1"; }

# raw_throughput between host 1 (send) and the hosts given (recv); unicast to the
# first when one receiver, multicast group 1 otherwise. Outputs in $out_prefix-*.json.
# memif: host 1 is the memif server and a client cannot start before its server,
# so the sender starts first (frames before the link is up are dropped at the
# sender; the receiver's rate counts from its first frame to its last). The
# sender outlasts the receivers by 3 s: a receiver's EAL start-up and memif
# connection took over a second on a loaded machine, and with --raw-seconds 1
# it found the sender gone (raw 0.0).
run_raw() {
  local dir=$1 mtu=$2 out_prefix=$3
  shift 3
  local group_args=() h pids=() dev peer=$1 device send_pid=""
  (($# > 1)) && group_args=(--group 1)
  device=$(state_of "$dir" device)
  start_sender() {
    local secs=$1
    dev=$(device_of "$dir" 1 "$peer")
    "$CLUSTER" exec 1 --dir "$dir" -- "$RAW" --role send --device "$dev" \
      --mac "$(host_mac 1)" --ip "$(host_ip 1)" --peer-mac "$(host_mac "$peer")" --peer-ip "$(host_ip "$peer")" \
      --mtu "$mtu" --seconds "$secs" --json "${group_args[@]}" \
      >"$out_prefix-send.json" 2>"$out_prefix-send.log" &
    send_pid=$!
    BG_PIDS+=("$send_pid")
  }
  if [[ $device == memif ]]; then
    start_sender $((RAW_SECONDS + 3))
    sleep 1
  fi
  for h in "$@"; do
    dev=$(device_of "$dir" "$h" 1)
    "$CLUSTER" exec "$h" --dir "$dir" -- "$RAW" --role recv --device "$dev" \
      --mac "$(host_mac "$h")" --ip "$(host_ip "$h")" --peer-mac "$(host_mac 1)" --peer-ip "$(host_ip 1)" \
      --mtu "$mtu" --seconds "$RAW_SECONDS" --json "${group_args[@]}" \
      >"$out_prefix-h$h.json" 2>"$out_prefix-h$h.log" &
    pids+=($!)
    BG_PIDS+=($!)
  done
  if [[ $device != memif ]]; then
    sleep 1  # receivers' EAL start-up; frames before it are not counted anyway
    start_sender "$RAW_SECONDS"
  fi
  wait_bounded $((RAW_SECONDS + 20)) "$send_pid" "${pids[@]}"
}

# The TCP fan-out of fraction $3 from host 1 to hosts 2..$2 of the cluster in
# $1 (no dsmd running there), result in $4; arguments after that go to each
# reader. The kernel gets the hosts' IPv4s for the run (the address otherwise
# belongs to DPDK) and loses them after.
run_tcp() {
  local dir=$1 hosts=$2 f=$3 out=$4 h pids=() peers=()
  local reader_args=("${@:5}")
  for ((h = 1; h <= hosts; h++)); do
    "$CLUSTER" exec "$h" --dir "$dir" -- ip addr add "$(host_ip "$h")/24" dev dsm0 2>/dev/null || true
  done
  for ((h = 2; h <= hosts; h++)); do
    "$CLUSTER" exec "$h" --dir "$dir" -- "$TCP" reader --port 7500 --size "$SIZE" "${reader_args[@]}" >"$out-reader$h.log" 2>&1 &
    pids+=($!)
    BG_PIDS+=($!)
    peers+=(--peer "$(host_ip "$h")")
  done
  "$CLUSTER" exec 1 --dir "$dir" -- timeout --kill-after=5 $((SECONDS_PER_RUN + 120)) "$TCP" writer \
    "${peers[@]}" --port 7500 --size "$SIZE" --fraction "$f" --seconds "$SECONDS_PER_RUN" \
    --window "$WINDOW" --iface dsm0 --json "$out" >"$out.log" 2>&1 || true
  wait_bounded 70 "${pids[@]}"
  for ((h = 1; h <= hosts; h++)); do
    "$CLUSTER" exec "$h" --dir "$dir" -- ip addr flush dev dsm0 2>/dev/null || true
  done
  sed 's/^/  /' "$out.log"
}

raw_summary() {  # one line from a receiver's JSON
  local f=$1
  if [[ -s $f ]] && command -v jq >/dev/null 2>&1; then
    jq -r '"\(.gbit_per_sec) Gbit/s, \(.frames_per_sec) frames/s of \(.frame_bytes) B, lost \(.lost)"' "$f" 2>/dev/null || cat "$f"
  elif [[ -s $f ]]; then
    cat "$f"
  else
    echo "no result"
  fi
}

RESULTS=()
NOTES=()
started=$(date +%s)
IFS=, read -r -a cfgs <<<"$CONFIGS"
IFS=, read -r -a fracs <<<"$FRACTIONS"
IFS=, read -r -a losses <<<"$LOSSES"
IFS=, read -r -a auths <<<"$AUTHS"
for auth in "${auths[@]}"; do
  [[ $auth == on || $auth == off ]] || die "bad --auth value '$auth' (on or off)"
done
for loss in "${losses[@]}"; do
  awk -v l="$loss" 'BEGIN { exit !(l ~ /^[0-9.]+$/ && l >= 0 && l < 1) }' \
    || die "bad --loss value '$loss' (a share of frames, 0 <= loss < 1)"
done
idx=0
for cfg in "${cfgs[@]}"; do
  IFS=: read -r device mtu readers <<<"$cfg"
  [[ -n $device && $mtu =~ ^[0-9]+$ && $readers =~ ^[0-9]+$ ]] || die "bad configuration '$cfg' (device:mtu:readers)"
  label="$device mtu$mtu R=$readers"
  idx=$((idx + 1))
  hosts=$((readers + 1))
  dir=$WORK/c$idx
  note "=== $label: $hosts hosts, area $SIZE, $SECONDS_PER_RUN s per run ==="
  CUR_DIR=$dir
  "$CLUSTER" up "$hosts" --dir "$dir" --mtu "$mtu" --device "$device" --no-daemons "${HUGEPAGES[@]}" >"$WORK/c$idx-up.log" 2>&1 \
    || { cat "$WORK/c$idx-up.log" >&2; die "cluster up failed for $label"; }

  # Raw reference first, while no dsmd uses the device.
  run_raw "$dir" "$mtu" "$WORK/c$idx-raw" 2
  raw_uni=$WORK/c$idx-raw-h2.json
  note "raw unicast h1->h2: $(raw_summary "$raw_uni")"
  mcast_args=()
  # memif links are point to point: no multicast to compare with.
  if ((readers > 1)) && [[ $device != memif ]]; then
    rx=()
    for ((h = 2; h <= hosts; h++)); do rx+=("$h"); done
    run_raw "$dir" "$mtu" "$WORK/c$idx-mraw" "${rx[@]}"
    for ((h = 2; h <= hosts; h++)); do
      mcast_args+=(--raw-mcast-json "$WORK/c$idx-mraw-h$h.json")
      note "raw multicast h1->h$h: $(raw_summary "$WORK/c$idx-mraw-h$h.json")"
    done
  fi

  # The TCP reference of each fraction, before any dsmd runs.
  if ((DO_TCP)); then
    tcp_dir=$dir
    if [[ $device == memif ]]; then
      tcp_dir=$WORK/c$idx-tcp
      CUR_TCP_DIR=$tcp_dir
      # 2 MiB pages for snapshot readers' buffers, as the daemons have.
      "$CLUSTER" up "$hosts" --dir "$tcp_dir" --mtu "$mtu" --device af_packet --no-daemons "${HUGEPAGES[@]}" >>"$WORK/c$idx-up.log" 2>&1 \
        || die "cluster up for the TCP reference failed for $label"
    fi
    for f in "${fracs[@]}"; do
      note "tcp fan-out f=$f: $hosts hosts"
      run_tcp "$tcp_dir" "$hosts" "$f" "$WORK/c$idx-tcp-f$f.json"
      if ((TCP_SNAPSHOTS)); then
        note "tcp fan-out f=$f, readers keeping atomic versions: $hosts hosts"
        run_tcp "$tcp_dir" "$hosts" "$f" "$WORK/c$idx-tcpsnap-f$f.json" --snapshots
      fi
    done
    if [[ $tcp_dir != "$dir" ]]; then
      "$CLUSTER" down --dir "$tcp_dir" >/dev/null 2>&1 || true
      CUR_TCP_DIR=""
    fi
  fi

  copies=1  # memif links carry one copy per reader
  [[ $device != memif ]] || copies=$readers
  for ai in "${!auths[@]}"; do
    auth=${auths[$ai]}
    set_auth "$dir" "$auth"
    auth_label=""
    auth_args=()
    if [[ $auth == on ]]; then auth_label=" key"; auth_args=(--keyed); fi
    for loss in "${losses[@]}"; do
      stop_daemons "$dir" "$hosts"
      fault_args=()
      loss_label=""
      if [[ $loss != 0 ]]; then
        fault_args=(--fault-drop "$loss" --fault-seed "$idx")
        loss_label=" loss$(awk -v l="$loss" 'BEGIN { printf "%g", l * 100 }')%"
      fi
      for ((h = 1; h <= hosts; h++)); do
        "$CLUSTER" start "$h" --dir "$dir" -- "${DSMD_ARGS[@]}" "${fault_args[@]}" >>"$WORK/c$idx-up.log" 2>&1 \
          || { tail -n 30 "$dir/h$h.log" >&2 || true; die "dsmd on host $h did not start for $label"; }
      done
      for f in "${fracs[@]}"; do
        run=$WORK/c$idx-a$ai$auth-l$loss-f$f
        board=$dir/board-a$ai$auth-l$loss-f$f
        rpids=()
        peers=()
        for ((r = 0; r < readers; r++)); do
          h=$((r + 2))
          "$CLUSTER" exec "$h" --dir "$dir" -- "$BENCH" reader --socket "$dir/h$h.sock" --board "$board" \
            --id "$r" --timeout-s 60 >"$run-reader$r.log" 2>&1 &
          rpids+=($!)
          BG_PIDS+=($!)
          peers+=(--peer-socket "$dir/h$h.sock")
        done
        rc=0
        "$CLUSTER" exec 1 --dir "$dir" -- timeout --kill-after=5 $((SECONDS_PER_RUN + 240)) "$BENCH" writer \
          --socket "$dir/h1.sock" --board "$board" --readers "$readers" "${peers[@]}" \
          --size "$SIZE" --fraction "$f" --rounds "$ROUNDS" --seconds "$SECONDS_PER_RUN" --window "$WINDOW" --gap-ms "$GAP_MS" \
          --reader-buffers "$BUFFERS" "${MANAGED_ARGS[@]}" \
          --timeout-s 60 --dsmctl "$DSMCTL" --raw-json "$raw_uni" "${mcast_args[@]}" \
          --label "$label$MANAGED_LABEL$loss_label$auth_label" --device "$device" --mtu "$mtu" --loss "$loss" "${auth_args[@]}" \
          --json "$run.json" --copies "$copies" --tcp-json "$WORK/c$idx-tcp-f$f.json" --tcp-snapshots-json "$WORK/c$idx-tcpsnap-f$f.json" \
          >"$run-writer.log" 2>&1 &
        wpid=$!
        BG_PIDS+=("$wpid")
        wait "$wpid" || rc=$?   # in the background, so that a signal reaches our trap at once
        wait_bounded 70 "${rpids[@]}"
        if [[ ! -s $run.json ]]; then
          # The writer died before writing anything: a record so the table says so.
          err=$(tail -n 3 "$run-writer.log" | tr '\n"\\' '  /')
          printf '{"tool":"dsm-bench","status":"failed","error":"writer exit %d: %s","config":{"label":"%s","fraction":%s}}\n' \
            "$rc" "$err" "$label" "$f" >"$run.json"
        fi
        sed 's/^/  /' "$run-writer.log"
        for ((r = 0; r < readers; r++)); do sed 's/^/  /' "$run-reader$r.log"; done
        RESULTS+=("$run.json")
      done
    done
  done

  "$CLUSTER" down --keep-logs --dir "$dir" >/dev/null 2>&1 || echo "$prog: warning: cluster down failed for $dir" >&2
  CUR_DIR=""
done

elapsed=$(($(date +%s) - started))
NOTES+=("$(nproc) CPUs, loadavg $(cut -d' ' -f1-3 /proc/loadavg), ${elapsed}s; area $SIZE, ${SECONDS_PER_RUN}s per run, window $WINDOW, $BUFFERS reader buffers, gap ${GAP_MS} ms${DSMD_ARGS[*]:+, dsmd ${DSMD_ARGS[*]}}, backing on $([[ ${#HUGEPAGES[@]} -gt 0 ]] && echo "2 MiB" || echo "4 KiB") pages; raw = bench/raw_throughput receiver on h2, same device and namespaces, no dsmd running")
if command -v git >/dev/null 2>&1 && git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  dirty=$(git -C "$ROOT" status --porcelain -- daemon coherence net libdsm 2>/dev/null | awk '{print $2}' | tr '\n' ' ')
  NOTES+=("source: commit $(git -C "$ROOT" rev-parse --short HEAD)${dirty:+, uncommitted changes in: $dirty}")
fi
others=$(pgrep -xc dsmd 2>/dev/null || true)
if [[ ${others:-0} -gt 0 ]]; then
  NOTES+=("$others other dsmd process(es) were running on this machine at the end (other clusters share the CPUs)")
fi
mkdir -p "$(dirname "$OUT")"
echo
notes=$(printf '%s\n' "${NOTES[@]}")
"$BENCH" report --out "$OUT" --notes "$notes" "${RESULTS[@]}"
