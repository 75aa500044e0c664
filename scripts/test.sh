#!/usr/bin/env bash
# The one test command: installs what is missing, builds, runs each fuzz target briefly (scripts/fuzz.sh, with its own
# clang build in build-fuzz/, kept between runs so that only what changed is compiled again), then every test (unit,
# integration, parity) with ctest, several at a time, and lists the ten slowest. Arguments go to ctest; a run with
# arguments (e.g. -R spec) skips the fuzzing, and so does DTRAIN_FUZZ_SECONDS=0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" --tests
"$root/scripts/build.sh"
build=${DTRAIN_BUILD_DIR:-$root/build}
cd "$build"
if [[ $# -eq 0 && ${DTRAIN_FUZZ_SECONDS:-10} != 0 ]]; then
  "$root/scripts/fuzz.sh" "${DTRAIN_FUZZ_SECONDS:-10}"
fi
# Tests run side by side, ${DTRAIN_TEST_JOBS:-4} of ctest's slots at once: many wait on sleeps, subprocesses and
# timeouts, so more than the 2 cores CI has pays (on 2 busy cores -j4 took 774 s where -j3 took 950 s). The test
# CMakeLists give the tests that share something global a RESOURCE_LOCK, and the time-bounded ones two slots or the
# machine to themselves. DTRAIN_TEST_JOBS=1 runs them one by one; a -j in the arguments comes later and wins. After
# the run: the ten slowest tests (from ctest's JUnit file), then ctest's exit status.
junit=$build/Testing/ctest-junit.xml
rm -f "$junit"
set +e
ctest --output-on-failure --timeout 600 -j "${DTRAIN_TEST_JOBS:-4}" --output-junit "$junit" "$@"
status=$?
set -e
if [[ -f $junit ]]; then python3 "$root/scripts/slowest_tests.py" "$junit" 10 || true; fi
exit $status
