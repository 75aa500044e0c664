#!/usr/bin/env bash
# Runs a multi-rank command; when it fails because two ranks would share one GPU (a machine with fewer GPUs than
# ranks: dtrain-trainer refuses it up front, as NCCL does with "Duplicate GPU detected"), prints "SKIPPED: ..." and
# exits 77 (scripts/gpu-check.sh reports it as skipped, with that reason).
out=$(mktemp)
"$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ] && grep -qiE 'duplicate GPU|GPU\(s\) are visible: start at most' "$out"; then
  echo "SKIPPED: two ranks would share one GPU ($(grep -iE -m1 -o 'duplicate GPU detected|[0-9]+ GPU\(s\) are visible' "$out"))"
  rc=77
fi
rm -f "$out"
exit "$rc"
