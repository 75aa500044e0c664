#!/usr/bin/env bash
# tokens.sh TRAINER OUT.bin TIMES FILE...: the FILEs concatenated TIMES times (the same text on every machine) as
# one llm.c token shard, through `dtrain-trainer prepare-text` (bytes as tokens, vocabulary 256). The step
# trainer-data of scripts/gpu/trainer-check.sh.
set -eu
trainer=$1 out=$2 times=$3
shift 3
for _ in $(seq "$times"); do cat "$@"; done >"$out.txt"
"$trainer" prepare-text "$out.txt" "$out"
rm -f "$out.txt"
