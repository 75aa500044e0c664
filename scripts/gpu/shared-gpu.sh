#!/usr/bin/env bash
# Runs a multi-rank command; when it fails because NCCL refused two ranks on one GPU (a machine with fewer GPUs than
# ranks), prints "SKIPPED: ..." and exits 77 (scripts/gpu-check.sh reports it as skipped, with that reason).
out=$(mktemp)
"$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ] && grep -qiE 'duplicate GPU|same (CUDA )?device' "$out"; then
  echo "SKIPPED: NCCL refuses two ranks on one GPU ($(grep -iE -m1 -o 'duplicate GPU[^"]{0,80}' "$out"))"
  rc=77
fi
rm -f "$out"
exit "$rc"
