#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs the test
# suites (unit, multiprocess, multihost, fuzz, soak; the last two bounded by
# default). Extra arguments go to `meson test`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec meson test -C "${BUILD_DIR:-build}" --print-errorlogs --num-processes 1 \
  --suite unit --suite multiprocess --suite multihost --suite fuzz --suite soak "$@"
