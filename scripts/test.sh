#!/usr/bin/env bash
# The one test command: installs what is missing, builds, runs every test (unit and integration) with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build=${DTRAIN_BUILD_DIR:-$root/build}
cd "$build"
ctest --output-on-failure --timeout 600 "$@"
