#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang into ${DTRAIN_FUZZ_BUILD_DIR:-build-fuzz} and runs each for
# SECONDS (default 60), as many at once as there are CPUs. Exits non-zero if any target crashes, leaks, times out or
# runs out of memory, printing the input that did it (re-run one with: <build-fuzz>/bin/fuzz_<target> <input>).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 300, scripts/fuzz.sh 30 spec_reader
#
# Each target starts from its checked-in seeds (tests/fuzz/corpus/<target>: inputs from the tests and every input
# that once crashed it) plus the repository's example specs and topology fixtures, and keeps what it finds in
# <build-fuzz>/corpus/<target>, so later runs go on from there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[[ $# -gt 0 ]] && shift
build=${DTRAIN_FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=(spec_reader spec_overrides topology_import data_shard checkpoint store_service agent_session)
[[ $# -gt 0 ]] && targets=("$@")

for tool in clang-14 clang++-14; do
  command -v "$tool" >/dev/null || { echo "fuzz: $tool not found; run scripts/setup.sh" >&2; exit 1; }
done

# One compile at a time on a shared machine (the same lock the main build's wrapper takes).
lock=${DTRAIN_BUILD_LOCK:-/tmp/dtrain-build.lock}
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
started=$(date +%s)
# Quick to compile, slow to run: -O1 with line tables is enough for coverage and readable stack traces. No target
# fuzzes GPU code, so the CUDA backend is left out (nvcc would also not take clang's sanitizer flags).
flock "$lock" bash -c '
  CC=clang-14 CXX=clang++-14 cmake -S "$0" -B "$1" -G Ninja -DDTRAIN_FUZZ=ON -DCMAKE_BUILD_TYPE=Fuzz \
    -DDTRAIN_WITH_CUDA=OFF -DCMAKE_CXX_FLAGS_FUZZ="-O1 -gline-tables-only" >/dev/null
  cmake --build "$1" -j "${DTRAIN_JOBS:-$(nproc)}" --target "${@:2}"' "$root" "$build" "${build_targets[@]}"
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - started )) s"

artifacts=$build/artifacts
mkdir -p "$artifacts"
# One target: runs it and writes its table line (and, on failure, the first error line) to <build>/fuzz-T.result;
# returns its exit status.
fuzz_one() {
  local t=$1
  local corpus=$build/corpus/$t
  local seeds=$build/seeds/$t
  rm -rf "$seeds"
  mkdir -p "$corpus" "$seeds"
  cp "$root/tests/fuzz/corpus/$t/"* "$seeds/" 2>/dev/null || true
  case $t in
    spec_reader) cp "$root"/configs/*.yaml "$seeds/" ;;
    topology_import) cp "$root"/tests/fixtures/topology/*.txt "$seeds/" ;;
  esac
  local options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
                 -artifact_prefix="$artifacts/$t-")
  # The protocol targets keep a server (and its connections' buffers) from one input to the next: memory still
  # held at the end of an input is not a leak there.
  case $t in store_service|agent_session) options+=(-detect_leaks=0) ;; esac
  # The agent's supervisor reaps and sweeps every child of its process, and the symbolizer that prints NEW_FUNC
  # lines would be one of them.
  [[ $t == agent_session ]] && options+=(-print_funcs=0)
  local log=$build/fuzz-$t.log rc=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/bin/fuzz_$t" "${options[@]}" "$corpus" "$seeds" >"$log" 2>&1 || rc=$?
  local runs rate cov size result
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -oE '(DONE|INITED|pulse|NEW|REDUCE) +cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
  size=$(find "$corpus" -type f | wc -l)
  if [[ $rc -eq 0 ]]; then
    result=ok
  else
    local input
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    result="FAILED (exit $rc): ${input:-no input saved}; log: $log"
  fi
  {
    printf '%-16s %10s %8s %8s %8s  %s\n' "$t" "${runs:-?}" "${rate:-?}" "${cov:-?}" "$size" "$result"
    if [[ $rc -ne 0 ]]; then
      grep -m1 -E 'ERROR: |runtime error|SUMMARY' "$log" | sed 's/^/    /' || true
    fi
  } > "$build/fuzz-$t.result"
  return $rc
}

# As many targets at once as there are CPUs: each target is one process on one core, so on two cores two run side
# by side, each for its SECONDS; the table comes out in target order.
jobs=$(nproc)
status=0
running=0
for t in "${targets[@]}"; do
  if (( running >= jobs )); then
    wait -n || status=1
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
while (( running > 0 )); do
  wait -n || status=1
  running=$((running - 1))
done
printf '%-16s %10s %8s %8s %8s  %s\n' target runs exec/s cov corpus result
for t in "${targets[@]}"; do cat "$build/fuzz-$t.result"; done
exit $status
