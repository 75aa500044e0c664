#!/usr/bin/env bash
# What a GPU step gains from reading nothing back: dtrain-trainer --device cuda with --log-every 1 (the host reads
# each step's loss and norm, waiting for the GPU every step) against --log-every W (one read per W steps; the host
# queues steps ahead of the GPU), side by side, alternating, ROUNDS times each. Three models: the small one of
# scripts/gpu/trainer-check.sh (L=2, C=128, T=64, B=4, 400 steps, W=100: a step of well under a millisecond, where
# the host's wait and the GPU's idle gap are a large part of it), GPT-2 124M at T=256, B=1 in bf16 (120 steps,
# W=20) and at T=1024, B=8 (40 steps, W=10: a step of ~180 ms). Prints each run's mean tokens/s over the steps after
# the first W (the trainer's --metrics; a window's steps share its rate, and the first window holds the start), then
# the medians' ratio.
#
# On a GPU machine, with a bundle from `scripts/gpu-check.sh --bundle .gpu` (see README, "Building with CUDA"):
#   scripts/bench/step_window_gpu.sh .gpu.tar.xz [ROUNDS, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:?usage: step_window_gpu.sh BUNDLE.tar.xz [ROUNDS]}
rounds=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf "$bundle" -C "$work"
tools=$(dirname "$(find "$work" -mindepth 2 -maxdepth 2 -name dtrain-trainer | head -1)")
export LD_LIBRARY_PATH=$tools/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
trainer=$tools/dtrain-trainer
"$root/scripts/gpu/tokens.sh" "$trainer" "$work/tokens.bin" 12 "$root/README.md" "$root/BENCHMARKS.md" >/dev/null

small=(--layers 2 --channels 128 --heads 4 --vocab 256 --max-seq-len 64 --seq-len 64 --batch-size 4 --steps 400
       --lr-schedule constant)
gpt2=(--model gpt2-124m --seq-len 1024 --batch-size 8 --steps 40 --precision bf16)
gpt2_b1=(--model gpt2-124m --seq-len 256 --batch-size 1 --steps 120 --precision bf16)
declare -A window=([small]=100 [gpt2]=10 [gpt2_b1]=20)
mean_rate() {  # mean tokens/s of the steps after the first $2 in the --metrics file $1
  python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r for r in rows if r.get("step", 0) > int(sys.argv[2]) and r.get("tokens_per_s")]
print("%.0f" % (sum(r["tokens_per_s"] for r in steps) / len(steps)))
PY
}
for model in small gpt2_b1 gpt2; do
  case $model in
    small) args=("${small[@]}") ;;
    gpt2_b1) args=("${gpt2_b1[@]}") ;;
    *) args=("${gpt2[@]}") ;;
  esac
  every1=() windowed=()
  for round in $(seq "$rounds"); do
    for every in 1 "${window[$model]}"; do
      rm -f "$work/m.jsonl"  # (--metrics appends: a resumed run's steps follow the earlier ones)
      "$trainer" "${args[@]}" --device cuda --data "$work/tokens.bin" --log-every "$every" \
        --metrics "$work/m.jsonl" >"$work/log.txt" 2>&1 || { cat "$work/log.txt"; exit 1; }
      rate=$(mean_rate "$work/m.jsonl" "${window[$model]}")
      if [ "$every" = 1 ]; then every1+=("$rate"); else windowed+=("$rate"); fi
      echo "$model round $round --log-every $every: $rate tokens/s"
    done
  done
  python3 - "$model" "${every1[*]}" "${windowed[*]}" "${window[$model]}" <<'PY'
import statistics, sys
one = [float(x) for x in sys.argv[2].split()]
windowed = [float(x) for x in sys.argv[3].split()]
print("RESULT %s: --log-every 1 median %.0f tokens/s, --log-every %s median %.0f tokens/s: %.2fx"
      % (sys.argv[1], statistics.median(one), sys.argv[4], statistics.median(windowed),
         statistics.median(windowed) / statistics.median(one)))
PY
done
