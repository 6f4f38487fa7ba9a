#!/usr/bin/env bash
# Configures (once) and builds libdsm into ./build. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  meson setup "$BUILD_DIR" --buildtype=debugoptimized
fi
ninja -C "$BUILD_DIR"
