#!/usr/bin/env bash
# Configures and builds dtrain into ${DTRAIN_BUILD_DIR:-build}. Binaries: <build>/bin/dtrain and friends.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${DTRAIN_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$build" -j "${DTRAIN_JOBS:-$(nproc)}"
echo "build: $build/bin/dtrain"
