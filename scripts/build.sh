#!/usr/bin/env bash
# Configures and builds dtrain into ${DTRAIN_BUILD_DIR:-build}. Binaries: <build>/bin/dtrain and friends.
#
#   scripts/build.sh             everything: the product, the tests and their tools (scripts/test.sh)
#   scripts/build.sh --product   the product alone: dtrain (launcher, agent and keeper in one binary), dtrain-trainer
#                                and the Python helpers in <build>/share/dtrain/python; no test-only package is needed
#                                (scripts/quickstart.sh)
#
# DTRAIN_BUILD_TYPE (default RelWithDebInfo) and DTRAIN_JOBS (default: the CPU count) are passed on; the build's own
# options (DTRAIN_DEBUG_INFO, DTRAIN_UNITY_BUILD, ...) are CMake's: `cmake -B build -D...` once, and they stay.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
tests=ON
targets=()
case ${1:-} in
  "") ;;
  --product) tests=OFF; targets=(--target dtrain dtrain-trainer) ;;
  *) echo "build: unknown argument '$1' (expected nothing or --product)" >&2; exit 2 ;;
esac
options=(-DCMAKE_BUILD_TYPE="${DTRAIN_BUILD_TYPE:-RelWithDebInfo}" -DDTRAIN_TESTS=$tests)
cmake -S "$root" -B "$build" -G Ninja "${options[@]}" >/dev/null
cmake --build "$build" -j "${DTRAIN_JOBS:-$(nproc)}" "${targets[@]}"
echo "build: $build/bin/dtrain"
