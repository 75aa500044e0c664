#!/usr/bin/env bash
# Start-up of two dtrain builds side by side: `dtrain run -n N -- /bin/true` wall time for N = 1, 8, 16, runs
# interleaved (A, B, A, B, ...), medians in ms. For telling a code change from a slower machine.
# Usage: launch_two_builds.sh DTRAIN_A DTRAIN_B [RUNS, default 7]
set -euo pipefail
a=$1 b=$2 runs=${3:-7}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
printf '%-4s %10s %10s\n' n A_ms B_ms
for n in 1 8 16; do
  ta="" tb=""
  for _ in $(seq "$runs"); do
    for which in a b; do
      bin=$a; [[ $which == b ]] && bin=$b
      start=$(date +%s%N)
      "$bin" run -n "$n" -- /bin/true >/dev/null 2>&1
      ms=$(( ($(date +%s%N) - start) / 1000000 ))
      if [[ $which == a ]]; then ta="$ta $ms"; else tb="$tb $ms"; fi
    done
  done
  printf '%-4s %10s %10s\n' "$n" "$(echo "$ta" | median)" "$(echo "$tb" | median)"
done
