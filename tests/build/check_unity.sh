#!/usr/bin/env bash
# check_unity.sh BUILD_DIR ON|OFF BATCH
# ON: the build compiles batches (CMake's unity_*.cxx sources, each including at most BATCH of the project's files)
# and no project source on its own except those a target keeps out of its batches; OFF: no batch at all.
set -euo pipefail
build=$1 unity=$2 batch=$3
commands=$build/compile_commands.json
[[ -f $commands ]] || { echo "FAIL: $commands not found"; exit 1; }
batches=$(grep -o '"file": *"[^"]*/unity_[0-9]*_cxx\.cxx"' "$commands" | sed 's/.*"\([^"]*\)"$/\1/' || true)
count=$(grep -c . <<<"$batches" || true)
[[ -z $batches ]] && count=0
case $unity in
  ON|on|1|TRUE|true)
    [[ $count -gt 0 ]] || { echo "FAIL: DTRAIN_UNITY_BUILD=ON, yet no batch is compiled"; exit 1; }
    largest=0
    while read -r f; do
      n=$(grep -c '^#include' "$f")
      (( n > largest )) && largest=$n
    done <<<"$batches"
    echo "$count batches, the largest of $largest sources"
    (( largest <= batch )) || { echo "FAIL: a batch of $largest sources, more than DTRAIN_UNITY_BATCH=$batch"; exit 1; }
    (( largest > 1 )) || { echo "FAIL: no batch holds more than one source"; exit 1; }
    ;;
  *)
    [[ $count -eq 0 ]] || { echo "FAIL: DTRAIN_UNITY_BUILD=OFF, yet $count batches are compiled"; exit 1; }
    echo "no batches: every source compiled on its own"
    ;;
esac
echo ok
