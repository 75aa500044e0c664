#!/usr/bin/env bash
# The one test command: installs what is missing, builds, runs every test (unit and integration) with ctest, then
# runs each fuzz target briefly (scripts/fuzz.sh; its own clang build in build-fuzz/). Arguments go to ctest; a run
# with arguments (e.g. -R spec) skips the fuzzing, and so does DTRAIN_FUZZ_SECONDS=0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build=${DTRAIN_BUILD_DIR:-$root/build}
cd "$build"
ctest --output-on-failure --timeout 600 "$@"
if [[ $# -eq 0 && ${DTRAIN_FUZZ_SECONDS:-10} != 0 ]]; then
  "$root/scripts/fuzz.sh" "${DTRAIN_FUZZ_SECONDS:-10}"
fi
