#!/usr/bin/env bash
# dtrain tune on the cases of tests/integration/test_tune.py and on dtrain-trainer's own flags, with the default
# trials (10 warm-up + 30 measured steps, 3 repeats): baseline and tuned rates side by side, the interval, the trials
# run and the time tuning took (see tune.py). Usage: tune.sh [tune.py options]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/tune.py" --dtrain "$build/bin/dtrain" "$@"
