# dtrain-trainer --device cuda on a GPU machine; sourced by scripts/gpu-check.sh, whose step() runs (or, with
# --dry-run, lists) each check. Expects DTRAIN, TRAINER, TRAINER_ENV (LD_LIBRARY_PATH for the bundle's libraries and
# cuBLASLt), WORK and DRY_RUN.
#   trainer-cpu-fp32 / trainer-gpu-fp32 / gpu-vs-cpu-fp32   10 AdamW steps of a small GPT on each device (TF32 off);
#                                                          losses within 1e-4 relative
#   trainer-gpu-bf16 / bf16-vs-fp32                        the same in bf16 on the GPU, within 0.05 of fp32
#   gpt2-124m / gpt2-124m-rate                             GPT-2 124M, T=1024, batch 8, bf16, 20 steps: median
#                                                          tokens/s after 5 steps, MFU against 989 TFLOP/s (H100/H200
#                                                          SXM dense bf16)
#   ddp-nccl / zero3-nccl                                  2 ranks over NCCL on this node's GPUs; with one GPU the
#                                                          ranks would share it, which dtrain-trainer and NCCL
#                                                          refuse: skipped, saying so
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
data=$WORK/tokens.bin
if [ "$DRY_RUN" -eq 0 ]; then
  # A few megabytes of text (the repository's own docs, repeated): enough tokens for 20 steps of 8 x 1024.
  for _ in $(seq 12); do cat "$here/../../README.md" "$here/../../BENCHMARKS.md"; done >"$WORK/tokens.txt"
  env "$TRAINER_ENV" "$TRAINER" prepare-text "$WORK/tokens.txt" "$data" >/dev/null
fi
small=(--layers 2 --channels 128 --heads 4 --vocab 256 --max-seq-len 64 --seq-len 64 --batch-size 4 --steps 10
       --seed 1 --lr 1e-3 --warmup-steps 3 --lr-schedule cosine --grad-clip 1.0 --data "$data")
gpu=(env "$TRAINER_ENV" NVIDIA_TF32_OVERRIDE=0 "$TRAINER")
step trainer-cpu-fp32 "trains 10 steps on the CPU (the reference)" 120 \
  env "$TRAINER_ENV" "$TRAINER" "${small[@]}" --device cpu --metrics "$WORK/cpu-fp32.jsonl"
step trainer-gpu-fp32 "trains 10 steps with --device cuda" 120 \
  "${gpu[@]}" "${small[@]}" --device cuda --metrics "$WORK/gpu-fp32.jsonl"
step gpu-vs-cpu-fp32 "every step's loss within 1e-4 relative of the CPU's" 30 \
  python3 "$here/compare_losses.py" rel 1e-4 "$WORK/gpu-fp32.jsonl" "$WORK/cpu-fp32.jsonl"
step trainer-gpu-bf16 "trains 10 steps with --device cuda --precision bf16" 120 \
  "${gpu[@]}" "${small[@]}" --device cuda --precision bf16 --metrics "$WORK/gpu-bf16.jsonl"
step bf16-vs-fp32 "every step's bf16 loss within 0.05 absolute of fp32's on the GPU" 30 \
  python3 "$here/compare_losses.py" abs 0.05 "$WORK/gpu-bf16.jsonl" "$WORK/gpu-fp32.jsonl"
step gpt2-124m "GPT-2 124M, T=1024, batch 8, bf16: 20 steps on the GPU" 300 \
  "${gpu[@]}" --model gpt2-124m --seq-len 1024 --batch-size 8 --steps 20 --precision bf16 --device cuda \
  --log-every 5 --data "$data" --metrics "$WORK/gpt2.jsonl"
step gpt2-124m-rate "median tokens/s of steps 6-20 and MFU (6N + 12LCT FLOPs per token, 989 TFLOP/s peak)" 30 \
  python3 "$here/compare_losses.py" rate "$WORK/gpt2.jsonl" 124475904 12 768 1024 989e12
for mode in ddp zero3; do
  extra=()
  [ "$mode" = zero3 ] && extra=(--zero 3)
  step "$mode-nccl" "2 ranks over NCCL train 10 steps (skipped when NCCL refuses two ranks on one GPU)" 180 \
    "$here/shared-gpu.sh" env "$TRAINER_ENV" "$DTRAIN" run -n 2 --logs-dir "$WORK/runs-$mode" -- "$TRAINER" \
    "${small[@]}" --device cuda "${extra[@]}" --metrics "$WORK/$mode-nccl.jsonl"
done
