#!/usr/bin/env bash
# Cold build times from clean clones, one after another on this machine (nothing else should run meanwhile):
#
#   build_time.sh quickstart [COMMIT]   scripts/quickstart.sh from a clean clone (packages present): its setup check,
#                                       the product build and the quickstart job, wall time; and the product build's
#                                       CPU time
#   build_time.sh full [COMMIT]         scripts/build.sh (every target) from a clean clone: wall and CPU time
#
# COMMIT (default HEAD) is cloned from this repository. A commit without `build.sh --product` (before the quickstart
# built the product alone) gets the same targets the way it could: cmake, then `--target dtrain dtrain-trainer`.
# Prints one line per measurement: what, commit, wall_s, cpu_s (user + system of the build and its children).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
what=${1:?usage: build_time.sh quickstart|full [COMMIT]}
commit=$(git -C "$root" rev-parse --short "${2:-HEAD}")
work=$(mktemp -d /tmp/dtrain-build-time.XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/src"
git -C "$work/src" checkout -q "$commit"
cd "$work/src"
timed() {  # timed LABEL COMMAND...: runs COMMAND, prints LABEL with its wall and CPU seconds
  local label=$1; shift
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" > "$work/out.log" 2>&1 || { tail -20 "$work/out.log"; exit 1; }
  read -r wall user sys < "$work/time"
  printf '%-24s %s  wall_s %8.1f  cpu_s %8.1f\n' "$label" "$commit" "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')"
}
case $what in
  quickstart)
    if grep -q -- '--product' scripts/build.sh; then
      timed "quickstart (whole)" scripts/quickstart.sh
      rm -rf build
      timed "product build" scripts/build.sh --product
    else
      timed "product build" bash -c 'cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
                                     cmake --build build -j "$(nproc)" --target dtrain dtrain-trainer'
    fi
    ;;
  full) timed "full build" scripts/build.sh ;;
  *) echo "build_time.sh: unknown measurement '$what' (quickstart or full)" >&2; exit 2 ;;
esac
