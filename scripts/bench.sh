#!/usr/bin/env bash
# Builds the microbenchmarks (and dsmd) if needed and runs them, each against a
# private dsmd with memfd backing, printing Google Benchmark's tables.
#
#   scripts/bench.sh [--json DIR] [--build DIR] [--filter REGEX] [-- BENCHMARK_ARGS...]
#
#   --json DIR      also write each benchmark's results as DIR/<name>.json
#   --build DIR     meson build directory (default: build); set up if missing
#   --filter REGEX  run only the benchmarks matching REGEX (--benchmark_filter)
#   after --        passed to every benchmark executable as they are
#
# The figures to read: log x_plain (1line target <= 2), publish x_memcpy
# (100% target <= 2), x_line_copy (1% target <= 3) and x_gather / x_gather_p50
# (1% target <= 2; means and medians), switch x_memcpy_area,
# tracking uffd_x_ref (1% touched target <= 1.5) and uffd_x_log (100% target <= 2).
# Then bench/python_view_bench.py: what Python pays to get an area's array.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
JSON_DIR=""
EXTRA=()
BENCHES=(log publish switch tracking)

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case "$1" in
    --json) JSON_DIR=${2:?--json needs a directory}; shift 2 ;;
    --build) BUILD=${2:?--build needs a directory}; shift 2 ;;
    --filter) EXTRA+=("--benchmark_filter=${2:?--filter needs a regex}"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA+=("$@"); break ;;
    *) echo "bench.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

if [[ ! -f "$BUILD/build.ninja" ]]; then
  echo "bench.sh: setting up $BUILD"
  meson setup "$BUILD" "$ROOT"
fi
targets=(daemon/dsmd)
for b in "${BENCHES[@]}"; do targets+=("bench/${b}_bench"); done
ninja -C "$BUILD" "${targets[@]}"
ninja -C "$BUILD" python/libdsm/_libdsm.cpython-311-x86_64-linux-gnu.so 2>/dev/null ||
  ninja -C "$BUILD"  # the Python module (its file name depends on the interpreter)

if [[ -n "$JSON_DIR" ]]; then
  mkdir -p "$JSON_DIR"
  JSON_DIR=$(cd "$JSON_DIR" && pwd)
fi

export DSM_DSMD="$BUILD/daemon/dsmd"
status=0
for b in "${BENCHES[@]}"; do
  args=("${EXTRA[@]}")
  if [[ -n "$JSON_DIR" ]]; then
    args+=("--benchmark_out=$JSON_DIR/$b.json" "--benchmark_out_format=json")
  fi
  echo
  echo "== $b =="
  if ! "$BUILD/bench/${b}_bench" "${args[@]}"; then
    echo "bench.sh: ${b}_bench failed" >&2
    status=1
  fi
done
if [[ -z "${EXTRA[*]}" ]]; then
  echo
  echo "== python view =="
  if ! PYTHONPATH="$BUILD/python" /usr/bin/python3 "$ROOT/bench/python_view_bench.py" \
      ${JSON_DIR:+--json "$JSON_DIR/python_view.json"}; then
    echo "bench.sh: python_view_bench failed" >&2
    status=1
  fi
fi
exit "$status"
