#!/usr/bin/env bash
# The virtual cluster of libdsm: N hosts as network namespaces on one machine,
# joined by a Linux bridge in a "switch" namespace, each running one dsmd.
# See docs/virtual-cluster.md for the picture, the addressing and the devices.
#
#   scripts/cluster.sh up N [--mtu BYTES] [--device af_packet|af_xdp|tap|memif] [--dir DIR]
#                           [--hugepages] [--no-daemons] [-- extra dsmd args...]
#   scripts/cluster.sh down [--dir DIR] [--keep-logs]
#   scripts/cluster.sh status [--dir DIR]
#   scripts/cluster.sh exec H [--dir DIR] -- command...
#
# Needs root (network namespaces, veth pairs). Every wait is bounded.
set -euo pipefail

readonly DEFAULT_DIR=/run/dsm/cluster
readonly DEFAULT_PREFIX=dsmc
readonly UDP_PORT=7400
readonly MAX_HOSTS=63           # dsmd host ids are 0-63; hosts are numbered 1..N
readonly MIN_MTU=576
readonly MAX_MTU=65000          # veth and bridge take up to 65535; dsmd takes 65000
readonly TAP_MAX_MTU=1500       # net_tap: no jumbo frames (max frame 1522)
readonly XDP_MAX_MTU=1500       # net_af_xdp (22.11): one umem chunk per frame, no multi-buffer
readonly HOST_IF=dsm0           # the veth end inside every host namespace
readonly BRIDGE=br0
readonly STATE_FILE=.cluster-state   # marker + facts about the cluster, in the state dir
readonly ALIAS_TAG=dsm-cluster:      # alias of lo in every namespace we create: "dsm-cluster:<dir>"
readonly STOP_WAIT_S=5
readonly HUGEPAGES_PER_DAEMON=512   # dsmd's default --region-size (1 GiB) in 2 MiB pages
readonly NR_HUGEPAGES=/proc/sys/vm/nr_hugepages
START_TIMEOUT_S=${DSM_START_TIMEOUT:-30}   # per dsmd --background start-up
TAP_WAIT_S=${DSM_TAP_WAIT:-10}             # for the TAP of a started dsmd to appear

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DSMD_BIN=${DSMD:-$repo_root/build/daemon/dsmd}

prog=cluster.sh
die() { echo "$prog: $*" >&2; exit 1; }
note() { echo "$prog: $*"; }
warn() { echo "$prog: warning: $*" >&2; }

usage() {
  cat <<EOF
usage:
  $0 up N [--mtu BYTES] [--device af_packet|af_xdp|tap|memif] [--dir DIR] [--hugepages] [--key]
       [--no-daemons] [-- dsmd args...]
  $0 down [--dir DIR] [--keep-logs]
  $0 status [--dir DIR]
  $0 exec H [--dir DIR] -- command...
  $0 start H [--dir DIR] [-- dsmd args...]

  up      builds N hosts (namespaces <prefix>-h1..hN) on a bridge (namespace <prefix>-sw),
          writes DIR/cluster.toml and starts one dsmd per host. If a cluster is already
          up in DIR it is taken down first. Defaults: --mtu 1500, --device af_packet,
          --dir $DEFAULT_DIR. --hugepages: first reserve the 2 MiB pages the daemons' backing
          needs (1 GiB each, dsmd's default region; down returns them): scattered line
          copies then miss the TLB far less. --key: frames are authenticated (AES-256-GMAC)
          with a key drawn into DIR/cluster.key (mode 600, id 1), which cluster.toml names;
          edit that file to rotate keys on the running cluster (daemon/key_file.h).
  down    stops the daemons, deletes the namespaces and removes the state dir. Quiet and
          successful when nothing is up.
  status  prints the hosts and whether their daemons are alive; exit 1 if no cluster.
  exec    runs a command on host H (in its namespace, with DSM_SOCKET set).
  start   starts host H's dsmd again (after it stopped or was killed); no-op if it runs.

Environment: DSMD (dsmd binary, default build/daemon/dsmd), DSM_START_TIMEOUT (s, default 30),
DSM_TAP_WAIT (s, default 10).
EOF
}

# ---------------------------------------------------------------------------
# Preconditions and naming

require_root() {
  if [[ $EUID -ne 0 ]]; then
    die "cluster.sh needs root: network namespaces and veth pairs; run it with sudo"
  fi
  command -v ip >/dev/null 2>&1 \
    || die "the 'ip' command is missing; install the iproute2 package (apt-get install iproute2)"
}

# Absolute, normalised state dir; restricted characters because it ends up in TOML strings
# and in DPDK device arguments (where ',' and '=' are separators).
resolve_dir() {
  local d=$1
  [[ -n $d ]] || die "--dir needs a directory"
  d=$(realpath -m -- "$d")
  [[ $d =~ ^[A-Za-z0-9._/+-]+$ ]] \
    || die "state dir '$d' may only contain letters, digits and . _ / + -"
  [[ $d != / ]] || die "refusing to use / as the state dir"
  # Longest path in it: /memif-NN-NN.sock; a Unix socket path has at most 107 bytes.
  ((${#d} + 17 <= 107)) || die "state dir '$d' is too long for Unix socket paths (max ~95 characters)"
  printf '%s\n' "$d"
}

# Short name prefix from the state dir: "dsmc" for the default one, "dsm" + 4 hex digits of
# a hash of the dir otherwise, so two clusters in different dirs never share a namespace.
prefix_for() {
  local d=$1 h
  if [[ $d == "$DEFAULT_DIR" ]]; then
    printf '%s\n' "$DEFAULT_PREFIX"
    return
  fi
  if command -v sha256sum >/dev/null 2>&1; then
    h=$(printf '%s' "$d" | sha256sum | cut -c1-4)
  else
    h=$(printf '%04x' "$(($(printf '%s' "$d" | cksum | cut -d' ' -f1) & 0xffff))")
  fi
  printf 'dsm%s\n' "$h"
}

host_ns() { printf '%s-h%d\n' "$PREFIX" "$1"; }
switch_ns() { printf '%s-sw\n' "$PREFIX"; }
host_ip() { printf '198.18.0.%d\n' "$1"; }
host_mac() { printf '02:00:c6:12:00:%02x\n' "$1"; }       # the DPDK port's MAC
sw_port_mac() { printf '02:00:c6:12:80:%02x\n' "$1"; }    # switch-side veth end
tap_kernel_mac() { printf '02:00:c6:12:01:%02x\n' "$1"; } # kernel side of a TAP (must differ)
tap_name() { printf 'tap-h%d\n' "$1"; }
sw_port() { printf 'sw-h%d\n' "$1"; }
sock_path() { printf '%s/h%d.sock\n' "$DIR" "$1"; }
pid_path() { printf '%s/h%d.pid\n' "$DIR" "$1"; }
log_path() { printf '%s/h%d.log\n' "$DIR" "$1"; }
memif_sock() { printf '%s/memif-%d-%d.sock\n' "$DIR" "$1" "$2"; }  # link of hosts $1 < $2

ns_exists() { [[ -e /run/netns/$1 ]]; }

# The owner tag we put on lo in each namespace we create ("" if none or unreadable).
ns_owner() {
  ip -n "$1" -o link show lo 2>/dev/null | sed -n 's/.*alias \(.*\)$/\1/p' | sed 's/[[:space:]]*$//'
}

# Namespaces named like ours (<prefix>-sw, <prefix>-hN).
our_ns_candidates() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-(sw|h[0-9]+)\$" || true
}

# Writes a sysctl inside a namespace through /proc/sys (no procps needed). Missing keys
# (kernel without IPv6) are ignored.
ns_sysctl() {
  local ns=$1 key=$2 value=$3 path
  path=/proc/sys/${key//.//}
  ip netns exec "$ns" sh -c "[ ! -e '$path' ] || echo '$value' > '$path'"
}

disable_ipv6_ns() {
  ns_sysctl "$1" net.ipv6.conf.all.disable_ipv6 1
  ns_sysctl "$1" net.ipv6.conf.default.disable_ipv6 1
}

make_ns() {
  local ns=$1
  ip netns add "$ns"
  ip -n "$ns" link set lo alias "${ALIAS_TAG}${DIR}"
  ip -n "$ns" link set lo up
  disable_ipv6_ns "$ns"
}

# ---------------------------------------------------------------------------
# State file: key=value lines we wrote ourselves; read without eval.

state_get() {
  local key=$1 file=$DIR/$STATE_FILE
  [[ -f $file ]] || return 0
  sed -n "s/^${key}=//p" "$file" | head -n1
}

# ---------------------------------------------------------------------------
# down

# The pid a dsmd wrote to a pid file, if that process is still a dsmd.
pid_from_file() {
  local pf=$1 pid
  [[ -f $pf ]] || return 0
  pid=$(head -n1 "$pf" 2>/dev/null | tr -dc '0-9')
  [[ -n $pid && -r /proc/$pid/comm ]] || return 0
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dsmd* ]] || return 0
  printf '%s\n' "$pid"
}

# Pids still alive among STOP_PIDS plus every process in the namespaces STOP_NSS.
STOP_PIDS=()
STOP_NSS=()
live_pids() {
  local p ns
  for p in "${STOP_PIDS[@]}"; do
    if kill -0 "$p" 2>/dev/null; then printf '%s\n' "$p"; fi
  done
  for ns in "${STOP_NSS[@]}"; do
    ip netns pids "$ns" 2>/dev/null || true
  done
}

# Stops the daemons STOP_PIDS (from their pid files) and everything else running in our
# namespaces STOP_NSS (children, commands started with `exec`): SIGTERM, up to STOP_WAIT_S
# seconds in total, then SIGKILL. A process left in a namespace would keep it (and its
# veth) alive.
stop_processes() {
  local -a left=()
  local i
  mapfile -t left < <(live_pids | sort -un)
  ((${#left[@]})) || return 0
  kill -TERM "${left[@]}" 2>/dev/null || true
  for ((i = 0; i < STOP_WAIT_S * 10; i++)); do
    mapfile -t left < <(live_pids | sort -un)
    ((${#left[@]})) || return 0
    sleep 0.1
  done
  warn "still running after ${STOP_WAIT_S}s, sending SIGKILL: ${left[*]}"
  kill -KILL "${left[@]}" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do
    mapfile -t left < <(live_pids | sort -un)
    ((${#left[@]})) || return 0
    sleep 0.1
  done
  warn "still running after SIGKILL: ${left[*]}"
}

# Tears down the cluster that belongs to DIR. Quiet and successful when nothing is up.
teardown() {
  local keep_logs=${1:-0} ns owner f
  local -a mine=() hosts=()

  for ns in $(our_ns_candidates); do
    owner=$(ns_owner "$ns")
    if [[ -z $owner || $owner == "${ALIAS_TAG}${DIR}" ]]; then
      mine+=("$ns")
    elif [[ $owner == "$ALIAS_TAG"* ]]; then
      warn "namespace $ns belongs to another cluster (${owner#"$ALIAS_TAG"}); leaving it"
    else
      warn "namespace $ns was not made by cluster.sh; leaving it"
    fi
  done

  # Processes first, so that nothing keeps a namespace alive after its name is removed.
  local pid
  STOP_PIDS=()
  STOP_NSS=("${mine[@]}")
  for f in "$DIR"/h*.pid; do
    pid=$(pid_from_file "$f")
    if [[ -n $pid ]]; then STOP_PIDS+=("$pid"); fi
  done
  stop_processes
  # Host namespaces first (their veths go with them), then the switch.
  for ns in "${mine[@]}"; do
    if [[ $ns != *-sw ]]; then hosts+=("$ns"); fi
  done
  for ns in "${hosts[@]}" "$(switch_ns)"; do
    if printf '%s\n' "${mine[@]}" | grep -qx -- "$ns"; then
      ip netns del "$ns" 2>/dev/null || warn "could not delete namespace $ns"
    fi
  done

  if [[ -f $DIR/$STATE_FILE ]]; then release_hugepages; fi

  # State files: only in a dir that holds our marker. A dir `up` created is removed with
  # everything in it (the daemons may leave files there too); in a dir that existed
  # before, only our own files are removed.
  if [[ -f $DIR/$STATE_FILE ]]; then
    local created d
    created=$(state_get created_dirs)
    if ((!keep_logs)) && [[ " $created " == *" $DIR "* && $DIR != / ]]; then
      rm -rf -- "$DIR"
      for d in $created; do          # the parents `up` created, deepest first, if empty
        if [[ $d != "$DIR" ]]; then rmdir -- "$d" 2>/dev/null || true; fi
      done
    else
      rm -f "$DIR"/h*.sock "$DIR"/h*.pid "$DIR"/cluster.toml "$DIR"/.cluster.toml.* "$DIR"/cluster.key \
        "$DIR"/memif-*.sock "$DIR/$STATE_FILE"
      if ((!keep_logs)); then rm -f "$DIR"/h*.log; fi
    fi
  fi
}

cmd_down() {
  local keep_logs=0 dir=$DEFAULT_DIR
  while (($#)); do
    case $1 in
      --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
      --dir=*) dir=${1#--dir=}; shift ;;
      --keep-logs) keep_logs=1; shift ;;
      -h | --help) usage; exit 0 ;;
      *) die "down: unknown argument '$1'" ;;
    esac
  done
  require_root
  DIR=$(resolve_dir "$dir")
  PREFIX=$(prefix_for "$DIR")
  teardown "$keep_logs"
}

# ---------------------------------------------------------------------------
# up

UP_IN_PROGRESS=0
on_exit() {
  local rc=$?
  if ((UP_IN_PROGRESS)) && ((rc != 0)); then
    echo "$prog: up failed; removing what it created" >&2
    UP_IN_PROGRESS=0
    teardown 0 || true
  fi
  exit "$rc"
}

print_log_tail() {
  local h=$1 log
  log=$(log_path "$h")
  echo "---- last lines of $log ----" >&2
  if [[ -s $log ]]; then tail -n 25 "$log" >&2; else echo "(empty)" >&2; fi
  echo "----" >&2
}

device_string() {
  local h=$1
  case $DEVICE in
    af_packet) printf 'net_af_packet0,iface=%s\n' "$HOST_IF" ;;
    af_xdp) printf 'net_af_xdp0,iface=%s,start_queue=0,queue_count=1\n' "$HOST_IF" ;;
    tap) printf 'net_tap0,iface=%s,mac=%s\n' "$(tap_name "$h")" "$(host_mac "$h")" ;;
  esac
}

# memif joins two processes: host h gets one link per other host g, a port named
# net_memif<k> (k counts h's links), served by the lower id on memif-<lo>-<hi>.sock.
memif_links_toml() {
  local h=$1 g k=0 role
  for ((g = 1; g <= N; g++)); do
    ((g == h)) && continue
    role=client
    ((h < g)) && role=server
    echo
    echo "[[host.link]]"
    echo "peer = $g"
    printf 'device = "net_memif%d,role=%s,id=0,socket=%s,socket-abstract=no,bsize=%d,mac=%s"\n' \
      "$k" "$role" "$(memif_sock $((h < g ? h : g)) $((h < g ? g : h)))" "$MEMIF_BSIZE" "$(host_mac "$h")"
    k=$((k + 1))
  done
}

write_cluster_toml() {
  # memif meshes too: the link mesh sends a group frame on every link, so a
  # version is framed once for all its readers.
  local f=$DIR/cluster.toml tmp h multicast=true
  tmp=$(mktemp "$DIR/.cluster.toml.XXXXXX")
  {
    echo "# written by scripts/cluster.sh"
    echo "[cluster]"
    echo "udp_port = $UDP_PORT"
    echo "mtu = $MTU"
    echo "multicast = $multicast"
    if ((KEYED)); then echo "key_file = \"cluster.key\""; fi
    for ((h = 1; h <= N; h++)); do
      echo
      echo "[[host]]"
      echo "id = $h"
      echo "mac = \"$(host_mac "$h")\""
      echo "ip = \"$(host_ip "$h")\""
      if [[ $DEVICE != memif ]]; then echo "device = \"$(device_string "$h")\""; fi
      echo "socket = \"$(sock_path "$h")\""
      if [[ $DEVICE == memif ]]; then memif_links_toml "$h"; fi
    done
  } >"$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$f"
  if ((KEYED)); then write_key_file; fi
}

# One key (id 1) from the kernel's random source, readable by root alone.
write_key_file() {
  local tmp secret
  tmp=$(umask 077 && mktemp "$DIR/.cluster.key.XXXXXX")
  secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  printf '# written by scripts/cluster.sh: the first key signs, every key listed is accepted\n[[key]]\nid = 1\nsecret = "%s"\n' \
    "$secret" >"$tmp"
  mv -f "$tmp" "$DIR/cluster.key"
}

build_switch() {
  local sw
  sw=$(switch_ns)
  make_ns "$sw"
  # No STP (ports forward at once), no multicast snooping (multicast floods to every port).
  # A fixed MAC of its own, so it does not change as ports come and go.
  ip -n "$sw" link add "$BRIDGE" address 02:00:c6:12:80:00 type bridge \
    stp_state 0 forward_delay 0 mcast_snooping 0
  ns_sysctl "$sw" "net.ipv6.conf.$BRIDGE.disable_ipv6" 1
  # A switch, not a firewall: where br_netfilter is built in (these sysctls
  # default to 1 and are per namespace), every bridged frame would also take
  # the IP netfilter path (a route lookup and an skb extension each, in the
  # sender's context on veth). Only this namespace's settings change.
  local k
  for k in iptables ip6tables arptables; do
    ns_sysctl "$sw" "net.bridge.bridge-nf-call-$k" 0
  done
  ip -n "$sw" link set "$BRIDGE" mtu "$MTU" up
}

build_host_veth() {
  local h=$1 ns sw port
  ns=$(host_ns "$h")
  sw=$(switch_ns)
  port=$(sw_port "$h")
  # Created directly inside the two namespaces: nothing ever appears in the root namespace.
  ip link add "$HOST_IF" netns "$ns" mtu "$MTU" address "$(host_mac "$h")" type veth \
    peer name "$port" netns "$sw" mtu "$MTU" address "$(sw_port_mac "$h")"
  ns_sysctl "$ns" "net.ipv6.conf.$HOST_IF.disable_ipv6" 1
  ns_sysctl "$sw" "net.ipv6.conf.$port.disable_ipv6" 1
  ip -n "$sw" link set "$port" master "$BRIDGE" up
  # Up without an address: the IP belongs to DPDK, not to the kernel.
  ip -n "$ns" link set "$HOST_IF" up
}

start_daemon() {
  local h=$1 ns rc=0
  ns=$(host_ns "$h")
  : >>"$(log_path "$h")"
  # --background returns once dsmd serves its socket (or failed). stdin/stdout are
  # detached so that callers capturing our output are not held open by the daemon.
  timeout --kill-after=5 "$START_TIMEOUT_S" \
    ip netns exec "$ns" "$DSMD_BIN" \
    --cluster "$DIR/cluster.toml" --host-id "$h" --socket "$(sock_path "$h")" \
    --background --pid-file "$(pid_path "$h")" --log-level info "${DSMD_EXTRA[@]}" \
    </dev/null >>"$(log_path "$h")" 2>&1 || rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "$prog: dsmd on host $h did not become ready within ${START_TIMEOUT_S}s" >&2
    print_log_tail "$h"
    return 1
  elif ((rc != 0)); then
    echo "$prog: dsmd on host $h failed to start (exit $rc)" >&2
    print_log_tail "$h"
    return 1
  fi
}

# net_tap: DPDK creates the TAP in the daemon's namespace. Move it to the switch, give its
# kernel side a MAC different from the DPDK port's (or the bridge would treat the port's
# MAC as its own and never forward unicast to it), and attach it to the bridge.
attach_tap() {
  local h=$1 ns sw tap i
  ns=$(host_ns "$h")
  sw=$(switch_ns)
  tap=$(tap_name "$h")
  for ((i = 0; i < TAP_WAIT_S * 10; i++)); do
    ip -n "$ns" link show "$tap" >/dev/null 2>&1 && break
    sleep 0.1
  done
  if ! ip -n "$ns" link show "$tap" >/dev/null 2>&1; then
    echo "$prog: dsmd on host $h runs but its TAP '$tap' did not appear within ${TAP_WAIT_S}s" >&2
    print_log_tail "$h"
    return 1
  fi
  ip -n "$ns" link set "$tap" netns "$sw"
  ns_sysctl "$sw" "net.ipv6.conf.$tap.disable_ipv6" 1
  ip -n "$sw" link set "$tap" address "$(tap_kernel_mac "$h")" mtu "$MTU"
  ip -n "$sw" link set "$tap" master "$BRIDGE" up
}

# Raises the machine's 2 MiB page pool so that N daemons find their backing
# there; sets HUGEPAGES_ADDED (what `down` gives back).
reserve_hugepages() {
  local want=$((N * HUGEPAGES_PER_DAEMON)) free before after
  HUGEPAGES_ADDED=0
  [[ -w $NR_HUGEPAGES ]] || { warn "cannot reserve hugepages ($NR_HUGEPAGES not writable)"; return; }
  free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
  ((free < want)) || return 0
  before=$(cat "$NR_HUGEPAGES")
  echo $((before + want - free)) >"$NR_HUGEPAGES" 2>/dev/null || true
  after=$(cat "$NR_HUGEPAGES")
  HUGEPAGES_ADDED=$((after > before ? after - before : 0))
  if ((after - before < want - free)); then
    warn "hugepages: got $((after - before)) of the $((want - free)) more 2 MiB pages asked for (memory fragmented?); some daemons use 4 KiB pages"
  else
    note "hugepages: reserved $HUGEPAGES_ADDED more 2 MiB pages ($after in all) for the daemons; down returns them"
  fi
}

release_hugepages() {
  local added now
  added=$(state_get hugepages_added)
  [[ $added =~ ^[0-9]+$ ]] && ((added > 0)) || return 0
  now=$(cat "$NR_HUGEPAGES")
  echo $((now > added ? now - added : 0)) >"$NR_HUGEPAGES" 2>/dev/null \
    || warn "could not return $added hugepages (echo N > $NR_HUGEPAGES)"
}

cmd_up() {
  local dir=$DEFAULT_DIR no_daemons=0 hugepages=0 h
  N=
  MTU=1500
  DEVICE=af_packet
  DSMD_EXTRA=()
  KEYED=0
  while (($#)); do
    case $1 in
      --mtu) (($# >= 2)) || die "--mtu needs a value"; MTU=$2; shift 2 ;;
      --mtu=*) MTU=${1#--mtu=}; shift ;;
      --device) (($# >= 2)) || die "--device needs a value"; DEVICE=$2; shift 2 ;;
      --device=*) DEVICE=${1#--device=}; shift ;;
      --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
      --dir=*) dir=${1#--dir=}; shift ;;
      --no-daemons) no_daemons=1; shift ;;
      --hugepages) hugepages=1; shift ;;
      --key) KEYED=1; shift ;;
      -h | --help) usage; exit 0 ;;
      --) shift; DSMD_EXTRA=("$@"); break ;;
      -*) die "up: unknown option '$1' (dsmd arguments go after --)" ;;
      *)
        [[ -z $N ]] || die "up: unexpected argument '$1'"
        N=$1; shift ;;
    esac
  done
  [[ -n $N ]] || die "up: how many hosts? usage: $0 up N [options]"
  if ! [[ $N =~ ^[0-9]+$ ]] || ((10#$N < 1 || 10#$N > MAX_HOSTS)); then
    die "up: N must be a number of hosts from 1 to $MAX_HOSTS, not '$N'"
  fi
  N=$((10#$N))
  if ! [[ $MTU =~ ^[0-9]+$ ]] || ((10#$MTU < MIN_MTU || 10#$MTU > MAX_MTU)); then
    die "up: --mtu must be from $MIN_MTU to $MAX_MTU bytes, not '$MTU'"
  fi
  MTU=$((10#$MTU))
  case $DEVICE in
    af_packet) ;;
    af_xdp)
      ((MTU <= XDP_MAX_MTU)) \
        || die "up: --device af_xdp takes no jumbo frames in DPDK 22.11 (no multi-buffer); use --mtu $XDP_MAX_MTU or less, or --device af_packet"
      ;;
    tap)
      ((MTU <= TAP_MAX_MTU)) \
        || die "up: --device tap has no jumbo frames (net_tap's largest frame is 1522 bytes); use --mtu $TAP_MAX_MTU or less, or --device af_packet"
      ;;
    memif)
      # A full mesh: N(N-1)/2 point-to-point links, N-1 ports per daemon.
      ((N >= 2)) || die "up: --device memif needs at least two hosts (memif links pairs of daemons)"
      ;;
    *) die "up: unknown --device '$DEVICE' (af_packet, af_xdp, tap or memif)" ;;
  esac
  # memif buffer: the whole largest frame (MTU + Ethernet header + VLAN tag + FCS) in one
  # buffer, since 22.11 misframes frames split across buffers. Rounded up to 1 KiB.
  MEMIF_BSIZE=$(((MTU + 22 + 1023) / 1024 * 1024))
  ((MEMIF_BSIZE >= 2048)) || MEMIF_BSIZE=2048

  require_root
  DIR=$(resolve_dir "$dir")
  PREFIX=$(prefix_for "$DIR")
  if ((!no_daemons)); then
    [[ -x $DSMD_BIN ]] \
      || die "dsmd not found at $DSMD_BIN; build it (scripts/build.sh), set DSMD=/path/to/dsmd, or use --no-daemons"
    command -v timeout >/dev/null 2>&1 || die "the 'timeout' command is missing (package coreutils)"
  fi

  # A namespace with our name but another owner: a hash collision of two state dirs.
  local ns owner
  for ns in $(our_ns_candidates); do
    owner=$(ns_owner "$ns")
    if [[ -n $owner && $owner != "${ALIAS_TAG}${DIR}" ]]; then
      die "namespace $ns already exists and belongs to '${owner#"$ALIAS_TAG"}'; use another --dir"
    fi
  done

  # Idempotent: a cluster already up in this dir is taken down first.
  if [[ -f $DIR/$STATE_FILE ]] || [[ -n $(our_ns_candidates) ]]; then
    note "a cluster is already up in $DIR; taking it down first"
    teardown 0
  fi

  UP_IN_PROGRESS=1
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  # State dir, remembering which directories we create so that `down` removes only those.
  local created="" d=$DIR
  while [[ ! -d $d ]]; do
    created="$created $d"
    d=$(dirname "$d")
  done
  mkdir -p "$DIR"
  HUGEPAGES_ADDED=0
  if ((hugepages)); then reserve_hugepages; fi
  {
    echo "prefix=$PREFIX"
    echo "hosts=$N"
    echo "device=$DEVICE"
    echo "mtu=$MTU"
    echo "daemons=$((!no_daemons))"
    echo "created_dirs=${created# }"
    echo "hugepages_added=$HUGEPAGES_ADDED"
  } >"$DIR/$STATE_FILE"

  # Network.
  if [[ $DEVICE != memif ]]; then
    build_switch
  fi
  for ((h = 1; h <= N; h++)); do
    make_ns "$(host_ns "$h")"
    if [[ $DEVICE == af_packet || $DEVICE == af_xdp ]]; then build_host_veth "$h"; fi
  done

  write_cluster_toml

  if ((!no_daemons)); then
    for ((h = 1; h <= N; h++)); do
      start_daemon "$h"
      if [[ $DEVICE == tap ]]; then attach_tap "$h"; fi
    done
  fi

  UP_IN_PROGRESS=0
  trap - EXIT INT TERM

  note "cluster up: $N host(s), device $DEVICE, MTU $MTU, state in $DIR"
  if [[ $DEVICE != memif ]]; then
    note "switch: namespace $(switch_ns), bridge $BRIDGE"
  fi
  note "hosts: namespaces $(host_ns 1)..$(host_ns "$N"), config $DIR/cluster.toml"
  if ((no_daemons)); then
    note "no daemons started (--no-daemons)"
    if [[ $DEVICE == tap ]]; then
      note "tap: each TAP exists only once a dsmd runs; nothing is attached to $BRIDGE yet"
    fi
  fi
  local dir_arg=""
  [[ $DIR == "$DEFAULT_DIR" ]] || dir_arg=" --dir $DIR"
  note "run on host H: $0 exec H$dir_arg -- command..."
}

# ---------------------------------------------------------------------------
# status

cmd_status() {
  local dir=$DEFAULT_DIR
  while (($#)); do
    case $1 in
      --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
      --dir=*) dir=${1#--dir=}; shift ;;
      -h | --help) usage; exit 0 ;;
      *) die "status: unknown argument '$1'" ;;
    esac
  done
  require_root
  DIR=$(resolve_dir "$dir")
  PREFIX=$(prefix_for "$DIR")
  if [[ ! -f $DIR/$STATE_FILE ]]; then
    local left
    left=$(our_ns_candidates | tr '\n' ' ')
    echo "no cluster in $DIR${left:+ (but namespaces $left exist; run down)}"
    return 1
  fi
  local n device mtu daemons h ns pid state sock sockstate
  n=$(state_get hosts)
  device=$(state_get device)
  mtu=$(state_get mtu)
  daemons=$(state_get daemons)
  echo "cluster in $DIR: $n host(s), device $device, MTU $mtu, udp port $UDP_PORT"
  if [[ $device != memif ]]; then
    local sw
    sw=$(switch_ns)
    if ns_exists "$sw"; then
      echo "switch: namespace $sw, bridge $BRIDGE ($(ip -n "$sw" -o link show master "$BRIDGE" 2>/dev/null | wc -l) ports)"
    else
      echo "switch: namespace $sw MISSING"
    fi
  fi
  printf '%-3s %-12s %-13s %-18s %-8s %-6s %s\n' ID NAMESPACE IP MAC PID DAEMON SOCKET
  for ((h = 1; h <= n; h++)); do
    ns=$(host_ns "$h")
    ns_exists "$ns" || ns="$ns(gone)"
    pid=-
    state=-
    if [[ $daemons == 1 ]]; then
      state=dead
      if [[ -f $(pid_path "$h") ]]; then
        pid=$(head -n1 "$(pid_path "$h")" | tr -dc '0-9')
        if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then state=alive; fi
      fi
    fi
    sock=$(sock_path "$h")
    sockstate=$sock
    [[ -S $sock ]] || sockstate="$sock (absent)"
    printf '%-3s %-12s %-13s %-18s %-8s %-6s %s\n' "$h" "$ns" "$(host_ip "$h")" \
      "$(host_mac "$h")" "${pid:--}" "$state" "$sockstate"
  done
}

# ---------------------------------------------------------------------------
# exec

cmd_exec() {
  local dir=$DEFAULT_DIR h=
  while (($#)); do
    case $1 in
      --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
      --dir=*) dir=${1#--dir=}; shift ;;
      --) shift; break ;;
      -h | --help) usage; exit 0 ;;
      *)
        [[ -z $h ]] || die "exec: unexpected argument '$1' (the command goes after --)"
        h=$1; shift ;;
    esac
  done
  [[ -n $h && $h =~ ^[0-9]+$ ]] || die "exec: usage: $0 exec H [--dir DIR] -- command..."
  h=$((10#$h))
  (($#)) || die "exec: no command given (usage: $0 exec H -- command...)"
  require_root
  DIR=$(resolve_dir "$dir")
  PREFIX=$(prefix_for "$DIR")
  local ns
  ns=$(host_ns "$h")
  ns_exists "$ns" || die "exec: host $h is not up (no namespace $ns for $DIR)"
  exec ip netns exec "$ns" env DSM_SOCKET="$(sock_path "$h")" "$@"
}

# ---------------------------------------------------------------------------
# start (restart one host's daemon)

cmd_start() {
  local dir=$DEFAULT_DIR h=
  DSMD_EXTRA=()
  while (($#)); do
    case $1 in
      --dir) (($# >= 2)) || die "--dir needs a value"; dir=$2; shift 2 ;;
      --dir=*) dir=${1#--dir=}; shift ;;
      --) shift; DSMD_EXTRA=("$@"); break ;;
      -h | --help) usage; exit 0 ;;
      *)
        [[ -z $h ]] || die "start: unexpected argument '$1'"
        h=$1; shift ;;
    esac
  done
  [[ -n $h && $h =~ ^[0-9]+$ ]] || die "start: usage: $0 start H [--dir DIR] [-- dsmd args...]"
  h=$((10#$h))
  require_root
  DIR=$(resolve_dir "$dir")
  PREFIX=$(prefix_for "$DIR")
  ns_exists "$(host_ns "$h")" || die "start: host $h is not up (no namespace for $DIR)"
  [[ $(state_get device) != tap ]] || die "start: restarting a tap host is not supported"
  local pid i
  pid=$(pid_from_file "$(pid_path "$h")" || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    if daemon_answers "$h"; then
      note "dsmd on host $h already runs (pid $pid)"
      return 0
    fi
    # Not answering: a daemon still exiting (just killed: tearing down its
    # memory takes a moment) or hung. Wait for it to go, bounded.
    for ((i = 0; i < START_TIMEOUT_S * 10; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null \
      && die "start: dsmd on host $h (pid $pid) runs but does not answer on $(sock_path "$h"); stop it first"
  fi
  rm -f "$(pid_path "$h")"
  start_daemon "$h" || exit 1
  daemon_answers "$h" || die "start: dsmd on host $h started but does not answer on $(sock_path "$h")"
  note "dsmd on host $h started (pid $(pid_from_file "$(pid_path "$h")"))"
}

# Whether host H's dsmd answers on its socket (dsmctl next to the dsmd binary).
daemon_answers() {
  local h=$1 ctl
  ctl=$(dirname "$DSMD_BIN")/dsmctl
  [[ -x $ctl ]] || return 0  # nothing to ask with: trust the pid
  timeout 5 ip netns exec "$(host_ns "$h")" "$ctl" --socket "$(sock_path "$h")" hosts >/dev/null 2>&1
}

# ---------------------------------------------------------------------------

main() {
  (($#)) || { usage >&2; exit 2; }
  local cmd=$1
  shift
  case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    exec) cmd_exec "$@" ;;
    start) cmd_start "$@" ;;
    -h | --help | help) usage ;;
    *) echo "$prog: unknown command '$cmd'" >&2; usage >&2; exit 2 ;;
  esac
}

main "$@"
