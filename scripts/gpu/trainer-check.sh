# dtrain-trainer --device cuda on a GPU machine; sourced by scripts/gpu-check.sh, whose step() runs (or, with
# --dry-run, lists) each check. Uses its DTRAIN, WORK and root, and expects TRAINER (dtrain-trainer) and TRAINER_ENV
# (LD_LIBRARY_PATH for the bundle's libraries and cuBLASLt).
#   trainer-data                                           3.5 M tokens: README.md and BENCHMARKS.md 12 times
#   trainer-cpu-fp32 / trainer-gpu-fp32 / gpu-vs-cpu-fp32   10 AdamW steps of a small GPT on each device (TF32 off);
#                                                          losses within 1e-4 relative. Every GPU run has
#                                                          DTRAIN_SYNC_DEBUG=error: no host wait inside a step
#   trainer-gpu-bf16 / bf16-vs-fp32                        the same in bf16 on the GPU, within 0.05 of fp32
#   trainer-gpu-fp16 / fp16-vs-fp32                        fp16 with loss scaling (its overflow flag the one host read
#                                                          a step makes), within 0.05 of fp32
#   trainer-gpu-zero3 / zero3-vs-ddp                      --zero 3 on one GPU: the 1-rank DDP run's losses
#   ckpt-gpu-to-cpu / ckpt-cpu-to-gpu / resumed-vs-cpu     a checkpoint saved on one device resumes on the other
#                                                          with the uninterrupted CPU run's losses (1e-4)
#   gpt2-124m / gpt2-124m-rate                             GPT-2 124M, T=1024, batch 8, bf16, 20 steps: median
#                                                          tokens/s after 5 steps, MFU against 989 TFLOP/s (H100/H200
#                                                          SXM dense bf16)
#   ddp-nccl / zero3-nccl                                  2 ranks over NCCL on this node's GPUs; with one GPU the
#                                                          ranks would share it, which dtrain-trainer and NCCL
#                                                          refuse: skipped, saying so
# shellcheck shell=bash disable=SC2154 # root, DTRAIN and WORK are scripts/gpu-check.sh's
gpu_dir=$root/scripts/gpu
data=$WORK/tokens.bin
# 20 steps of 8 x 1024 need 163,841 tokens (trainer/data/loader.cpp refuses a shard with fewer than one step's).
step trainer-data "prepare-text writes the shard (README.md and BENCHMARKS.md 12 times: about 3.5 M tokens)" 60 \
  env "$TRAINER_ENV" "$gpu_dir/tokens.sh" "$TRAINER" "$data" 12 "$root/README.md" "$root/BENCHMARKS.md"
small=(--layers 2 --channels 128 --heads 4 --vocab 256 --max-seq-len 64 --seq-len 64 --batch-size 4 --steps 10
       --seed 1 --lr 1e-3 --warmup-steps 3 --lr-schedule cosine --grad-clip 1.0 --data "$data")
# DTRAIN_SYNC_DEBUG=error: a host wait for the GPU inside a training step fails the run (trainer/common/host_wait.h).
gpu=(env "$TRAINER_ENV" NVIDIA_TF32_OVERRIDE=0 DTRAIN_SYNC_DEBUG=error "$TRAINER")
step trainer-cpu-fp32 "trains 10 steps on the CPU (the reference)" 120 \
  env "$TRAINER_ENV" "$TRAINER" "${small[@]}" --device cpu --metrics "$WORK/cpu-fp32.jsonl"
step trainer-gpu-fp32 "trains 10 steps with --device cuda" 120 \
  "${gpu[@]}" "${small[@]}" --device cuda --metrics "$WORK/gpu-fp32.jsonl"
step gpu-vs-cpu-fp32 "every step's loss within 1e-4 relative of the CPU's" 30 \
  python3 "$gpu_dir/compare_losses.py" rel 1e-4 "$WORK/gpu-fp32.jsonl" "$WORK/cpu-fp32.jsonl"
step trainer-gpu-bf16 "trains 10 steps with --device cuda --precision bf16" 120 \
  "${gpu[@]}" "${small[@]}" --device cuda --precision bf16 --metrics "$WORK/gpu-bf16.jsonl"
step bf16-vs-fp32 "every step's bf16 loss within 0.05 absolute of fp32's on the GPU" 30 \
  python3 "$gpu_dir/compare_losses.py" abs 0.05 "$WORK/gpu-bf16.jsonl" "$WORK/gpu-fp32.jsonl"
step trainer-gpu-fp16 "trains 10 steps with --device cuda --precision fp16 (loss scaling)" 120 \
  "${gpu[@]}" "${small[@]}" --device cuda --precision fp16 --metrics "$WORK/gpu-fp16.jsonl"
step fp16-vs-fp32 "every step's fp16 loss within 0.05 absolute of fp32's on the GPU" 30 \
  python3 "$gpu_dir/compare_losses.py" abs 0.05 "$WORK/gpu-fp16.jsonl" "$WORK/gpu-fp32.jsonl"
# ZeRO-3 on one GPU (its gathers, reductions and moments through NCCL's device buffers) is plain AdamW: the losses of
# the DDP run above. Then a checkpoint written on the GPU resumes on the CPU, and the reverse.
step trainer-gpu-zero3 "trains 10 steps with --device cuda --zero 3 on one rank" 120 \
  "${gpu[@]}" "${small[@]}" --device cuda --zero 3 --metrics "$WORK/gpu-zero3.jsonl"
step zero3-vs-ddp "every step's loss within 1e-6 relative of the 1-rank DDP run's on the GPU" 30 \
  python3 "$gpu_dir/compare_losses.py" rel 1e-6 "$WORK/gpu-zero3.jsonl" "$WORK/gpu-fp32.jsonl"
# The sh -c scripts below are single-quoted on purpose: $0 and $@ are their own arguments (SC2016).
# A constant learning rate after the warmup: a 5-step run's cosine would not be the 10-step run's.
step trainer-cpu-const "10 steps on the CPU with a constant learning rate (the resumed runs' reference)" 120 \
  env "$TRAINER_ENV" "$TRAINER" "${small[@]}" --lr-schedule constant --device cpu --metrics "$WORK/cpu-const.jsonl"
small+=(--lr-schedule constant)
# shellcheck disable=SC2016
step ckpt-gpu-to-cpu "5 steps on the GPU saving a checkpoint, then steps 6-10 resumed on the CPU" 120 \
  sh -c '"$@" --device cuda --steps 5 --save-every 5 --checkpoint-dir "$0" &&
         "$@" --device cpu --resume --checkpoint-dir "$0" --metrics "$0.jsonl"' "$WORK/ckpt-g2c" \
  "${gpu[@]}" "${small[@]}"
# shellcheck disable=SC2016
step ckpt-cpu-to-gpu "5 steps on the CPU saving a checkpoint, then steps 6-10 resumed on the GPU" 120 \
  sh -c '"$@" --device cpu --steps 5 --save-every 5 --checkpoint-dir "$0" &&
         "$@" --device cuda --resume --checkpoint-dir "$0" --metrics "$0.jsonl"' "$WORK/ckpt-c2g" \
  "${gpu[@]}" "${small[@]}"
# shellcheck disable=SC2016
step resumed-vs-cpu "steps 6-10 of both resumed runs within 1e-4 relative of the CPU run's" 30 \
  sh -c 'python3 "$0" rel-tail 1e-4 "$1" "$3" && python3 "$0" rel-tail 1e-4 "$2" "$3"' "$gpu_dir/compare_losses.py" \
  "$WORK/ckpt-g2c.jsonl" "$WORK/ckpt-c2g.jsonl" "$WORK/cpu-const.jsonl"
step gpt2-124m "GPT-2 124M, T=1024, batch 8, bf16: 20 steps on the GPU" 180 \
  "${gpu[@]}" --model gpt2-124m --seq-len 1024 --batch-size 8 --steps 20 --precision bf16 --device cuda \
  --log-every 5 --data "$data" --metrics "$WORK/gpt2.jsonl"
# N = 124,475,904, dtrain-trainer's own count (llm.c's: the vocabulary padded to 50,304); FLOPs per token as its
# model_flops_per_token (trainer/train/report/step_report.cpp).
step gpt2-124m-rate "median tokens/s of steps 6-20 and MFU (6N + 12LCT FLOPs per token, 989 TFLOP/s peak)" 30 \
  python3 "$gpu_dir/compare_losses.py" rate "$WORK/gpt2.jsonl" 124475904 12 768 1024 989e12
for mode in ddp zero3; do
  extra=()
  [ "$mode" = zero3 ] && extra=(--zero 3)
  step "$mode-nccl" "2 ranks over NCCL train 10 steps (skipped when NCCL refuses two ranks on one GPU)" 120 \
    "$gpu_dir/shared-gpu.sh" env "$TRAINER_ENV" DTRAIN_COMM_BACKEND=nccl DTRAIN_SYNC_DEBUG=error "$DTRAIN" run -n 2 \
    --logs-dir "$WORK/runs-$mode" -- "$TRAINER" "${small[@]}" --device cuda "${extra[@]}" \
    --metrics "$WORK/$mode-nccl.jsonl"
done
