#!/usr/bin/env bash
# Configures and builds dtrain into ${DTRAIN_BUILD_DIR:-build}. Binaries: <build>/bin/dtrain and friends.
#
#   scripts/build.sh             everything: the product, the tests and their tools (scripts/test.sh)
#   scripts/build.sh --product   the product alone: dtrain (launcher, agent and keeper in one binary), dtrain-trainer
#                                and the Python helpers in <build>/share/dtrain/python; no test-only package is needed
#                                (scripts/quickstart.sh)
#
# DTRAIN_BUILD_TYPE (default RelWithDebInfo), DTRAIN_JOBS (default: the CPU count) and DTRAIN_DEBUG_INFO (lines or
# full, see CMakeLists.txt) are passed on.
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
[[ -n ${DTRAIN_DEBUG_INFO:-} ]] && options+=(-DDTRAIN_DEBUG_INFO="$DTRAIN_DEBUG_INFO")
cmake -S "$root" -B "$build" -G Ninja "${options[@]}" >/dev/null
cmake --build "$build" -j "${DTRAIN_JOBS:-$(nproc)}" "${targets[@]}"
echo "build: $build/bin/dtrain"
