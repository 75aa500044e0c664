#!/usr/bin/env bash
# The one test command: installs what is missing, builds, runs each fuzz target briefly (scripts/fuzz.sh, with its own
# clang build in build-fuzz/), then every test (unit, integration, parity) with ctest. Arguments go to ctest; a run
# with arguments (e.g. -R spec) skips the fuzzing, and so does DTRAIN_FUZZ_SECONDS=0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build=${DTRAIN_BUILD_DIR:-$root/build}
cd "$build"
if [[ $# -eq 0 && ${DTRAIN_FUZZ_SECONDS:-10} != 0 ]]; then
  "$root/scripts/fuzz.sh" "${DTRAIN_FUZZ_SECONDS:-10}"
fi
# Last, so that ctest's summary is the run's closing line.
ctest --output-on-failure --timeout 600 "$@"
