#pragma once

// dtrain-trainer's command line. Two forms:
//   dtrain-trainer [TRAINING FLAGS]              train (single process, or one rank of a dtrain/torchrun job)
//   dtrain-trainer prepare-text IN.txt OUT.bin   convert text to a token shard (bytes as tokens, vocabulary 256)
// Flag names follow the trainer's interface (issue: dtrain-trainer); every training flag is in TrainOptions.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/model/config.h"

namespace dtrain::trainer {

struct TrainOptions {
  // Model shape. --model PRESET gives all of it ("tiny", "gpt2-124m"); --layers/--channels/--heads/--max-seq-len/
  // --vocab set or override single fields. Without --model, the shape comes from --init-from's header, or else
  // --layers, --channels and --heads are required, --max-seq-len defaults to --seq-len (1024 without it) and
  // --vocab to 256 (bytes). The padded vocabulary is --vocab rounded up
  // to a multiple of 128, as llm.c pads it.
  std::string model;
  int layers = 0;
  int channels = 0;
  int heads = 0;
  int max_seq_len = 0;
  int vocab = 0;

  int batch_size = 4;         // --batch-size: sequences per rank per micro-step
  int seq_len = 0;            // --seq-len: tokens per sequence; 0 = the model's max_seq_len
  long steps = 10;            // --steps: optimizer steps in the whole run (a resumed run stops at the same step)
  std::uint64_t seed = 1337;  // --seed: weight initialisation (ignored with --init-from or when resuming)

  float lr = 6e-4f;                      // --lr: peak learning rate
  float beta1 = 0.9f;                    // --beta1
  float beta2 = 0.95f;                   // --beta2
  float eps = 1e-8f;                     // --eps
  float weight_decay = 0.1f;             // --weight-decay: on 2-D weights only (nanoGPT)
  float grad_clip = 1.0f;                // --grad-clip: global-norm clip; 0 = off
  long warmup_steps = 0;                 // --warmup-steps: linear warmup from lr/W to lr
  std::string lr_schedule = "constant";  // --lr-schedule: constant | cosine (to lr * min_lr_ratio at --steps)
  float min_lr_ratio = 0.0f;             // --min-lr-ratio: the cosine's floor as a fraction of --lr
  int grad_accum = 1;                    // --grad-accum: micro-steps per optimizer step
  int zero = 0;                          // --zero: 0 = DDP; 1, 2, 3 = ZeRO stage (trainer/parallel/zero/engine.h)
  // --ddp-bucket-mb: DDP bucket size after the first 1 MiB bucket (PyTorch's bucket_cap_mb); unset: the default rule
  // min(25 MiB, max(1 MiB, gradient bytes / 8)), which keeps the last bucket (exposed: it holds wte, which backward
  // finishes last) at most an eighth of the gradient (trainer/parallel/ddp/buckets.h).
  std::optional<double> ddp_bucket_mb;
  // --precision: fp32 | bf16 | fp16. bf16 / fp16 = mixed precision: fp32 master weights and AdamW state, a 16-bit
  // working copy for the matrix products (trainer/model/gpt.h); --zero 3 shards the working copy and all-gathers it
  // in 16 bits (trainer/parallel/zero/engine.h).
  std::string precision = "fp32";
  // fp16 only: dynamic loss scaling (trainer/optim/loss_scaler.h, GradScaler's rule).
  float loss_scale_init = 65536.0f;      // --loss-scale-init: the first scale (2^16)
  int loss_scale_growth_interval = 2000;  // --loss-scale-growth-interval: finite steps before the scale doubles
  // --inject-inf-steps: for tests, 1-based optimizer steps whose gradients get an inf (on rank 0, after the
  // reduction), so that the loss scaler's overflow path runs; fp16 only.
  std::vector<long> inject_inf_steps;
  // --ddp-comm-dtype: fp32 | bf16 | fp16, the dtype of DDP's gradient allreduce (--zero 0; PyTorch's
  // bf16/fp16_compress_hook, trainer/parallel/ddp/reducer.h).
  std::string ddp_comm_dtype = "fp32";
  // --param-dtype: fp32 | bf16 | fp16, the dtype of --zero 1..3's parameter all-gathers (PyTorch FSDP's param_dtype);
  // empty = the --precision. trainer/parallel/zero/engine.h says what fp32 with a 16-bit precision does.
  std::string param_dtype;
  // --reduce-dtype: fp32 | bf16 | fp16, the dtype of --zero 1..3's gradient reduce-scatters (PyTorch FSDP's
  // reduce_dtype; trainer/parallel/zero/reducer.h).
  std::string reduce_dtype = "fp32";

  std::string data;            // --data: glob of llm.c token shards (required)
  std::string init_from;       // --init-from: llm.c model checkpoint to start from
  long save_every = 0;         // --save-every: checkpoint every N steps (and after the last); 0 = never
  bool resume = false;         // --resume: continue from the newest complete checkpoint in checkpoint_dir
  std::string checkpoint_dir = "checkpoints";  // --checkpoint-dir: where --save-every writes and --resume reads
  std::string metrics;         // --metrics: JSONL file of per-step metrics (rank 0 writes it)
  // --device: cpu | cuda | auto. cuda: the model, its gradients, AdamW's state and the activations on GPU
  // LOCAL_RANK (one GPU per rank), gradients reduced over NCCL; auto: cuda when a GPU is visible, else cpu
  // (trainer/train/device.h).
  std::string device = "auto";
  int threads = 0;             // --threads: CPU threads; 0 = OMP_NUM_THREADS if set, else all cores
  // --tp, --pp: tensor- and pipeline-parallel sizes (DP = world / (TP x PP); rank order as Megatron-LM's,
  // trainer/parallel/grid/rank_grid.h); --dry-run prints the layout. Both train on the CPU (trainer/model/gpt.h's
  // tensor and pipeline parallelism); --zero 2|3 with --pp above 1 is refused (rank_grid.h). --pp-schedule: gpipe |
  // 1f1b (the order of a stage's forwards and backwards, trainer/parallel/pipeline/schedule.h); the micro-batches are
  // --grad-accum's.
  int tp = 1;
  int pp = 1;
  std::string pp_schedule = "1f1b";
  // --pp-virtual V: model chunks per stage (interleaved 1F1B, Narayanan et al. 2021; layout.h's virtual stages): the
  // bubble shrinks V times; layers must divide by --pp x V and --grad-accum by --pp.
  int pp_virtual = 1;
  // --sequence-parallel: with --tp above 1, the residual stream's tokens split over the tensor-parallel group
  // (trainer/model/gpt_sequence.cpp); B x T must divide by --tp.
  bool sequence_parallel = false;
  bool allow_cross_node_tp = false;  // --allow-cross-node-tp: accept a TP group that spans nodes
  // --recompute: none | selective | full (trainer/model/gpt.h's Recompute): what backward recomputes instead of
  // keeping; the losses are none's to the bit, the activations fewer (the --metrics line's mem_activations_bytes).
  std::string recompute = "none";
  // --dry-run: print the model and each rank's TP/DP/PP coordinates and groups, then exit without training (the
  // world and the ranks per node from WORLD_SIZE and LOCAL_WORLD_SIZE, as a launcher sets them; 1 without).
  bool dry_run = false;
  long log_every = 1;          // --log-every: console line every N steps (rank 0)
  long debug_stall_step = 0;   // --debug-stall-step (tests of the launcher's hang check): sleep before step N; 0 = off
  int debug_stall_rank = -1;   // --debug-stall-rank: with --debug-stall-step, only this rank stalls; -1 = every rank
};

// The model shape the options describe: --model's preset, else `from_file` (the header of --init-from's
// checkpoint) when given, else --layers/--channels/--heads; then the single-field flags override. Throws
// std::invalid_argument naming the flag to fix.
GptConfig resolve_config(const TrainOptions& options, const GptConfig* from_file = nullptr);

struct PrepareTextArgs {
  std::string input;
  std::string output;
};

// `gemm-rate`: the fp32 GEMM rate of the trainer's matrix product (kernels/cpu/gemm_rate.h), one JSON line on stdout
// ({"flops_per_s", "threads", "size", "repeats"}); `dtrain doctor` runs it and caches the rate.
struct GemmRateArgs {
  int threads = 0;   // --threads: as training's (0 = OMP_NUM_THREADS if set, else all cores)
  int size = 512;    // --size: M = N = K
};

// One parsed command line.
struct Command {
  std::optional<PrepareTextArgs> prepare_text;  // set for `prepare-text`
  std::optional<GemmRateArgs> gemm_rate;        // set for `gemm-rate`
  TrainOptions train;                           // otherwise
  int exit_code = -1;  // >= 0: exit now with this code (--help: 0; bad flags: 2, the error already printed)
};

Command parse_command_line(int argc, char** argv);

}  // namespace dtrain::trainer
