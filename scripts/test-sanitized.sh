#!/usr/bin/env bash
# The unit, multiprocess and multihost (root) suites built with
# AddressSanitizer and UndefinedBehaviorSanitizer (Meson's b_sanitize) in
# build-sanitize: memory errors, leaks at exit and undefined behaviour fail
# the test. Extra arguments go to `meson test`. The first build takes ~30
# minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build-sanitize}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  meson setup "$BUILD_DIR" --buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false
fi
# meson test builds what the chosen suites need, not the benchmarks.
# handle_segv=0: tests that check a real crash still dies of SIGSEGV (and
# libdsm's page tracker) need the kernel's signal, not ASan's report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:handle_segv=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec meson test -C "$BUILD_DIR" --print-errorlogs --num-processes 1 \
  --suite unit --suite multiprocess --suite multihost "$@"
