#include "trainer/train/options.h"

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

namespace dtrain::trainer {

GptConfig resolve_config(const TrainOptions& o, const GptConfig* from_file) {
  GptConfig config;
  if (!o.model.empty()) {
    config = GptConfig::preset(o.model);
  } else if (from_file != nullptr && o.layers == 0 && o.channels == 0 && o.heads == 0) {
    config = *from_file;
  } else {
    if (o.layers <= 0 || o.channels <= 0 || o.heads <= 0) {
      throw std::invalid_argument("give --model PRESET (tiny, gpt2-124m), or all of --layers, --channels and "
                                  "--heads (with --max-seq-len and --vocab, defaults --seq-len and 256)");
    }
    config.max_seq_len = o.seq_len > 0 ? o.seq_len : 1024;
    config.vocab_size = 256;
  }
  if (o.layers > 0) config.num_layers = o.layers;
  if (o.channels > 0) config.channels = o.channels;
  if (o.heads > 0) config.num_heads = o.heads;
  if (o.max_seq_len > 0) config.max_seq_len = o.max_seq_len;
  if (o.vocab > 0 || config.padded_vocab_size < config.vocab_size) {
    if (o.vocab > 0) config.vocab_size = o.vocab;
    config.padded_vocab_size = GptConfig::pad_vocab(config.vocab_size);
  }
  config.validate();
  int seq_len = o.seq_len > 0 ? o.seq_len : config.max_seq_len;
  if (seq_len > config.max_seq_len) {
    throw std::invalid_argument("--seq-len " + std::to_string(seq_len) + " is longer than the model's max_seq_len " +
                                std::to_string(config.max_seq_len) + "; lower --seq-len or raise --max-seq-len");
  }
  return config;
}

namespace {

// "must be > 0, got -1" (CLI11 prefixes the flag's name).
CLI::Validator at_least(double bound, bool strict) {
  std::string relation = std::string(strict ? "> " : ">= ") + CLI::detail::to_string(bound);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "must be a number, got '" + text + "'";
        if (strict ? value > bound : value >= bound) return {};
        return "must be " + relation + ", got " + text;
      },
      "NUMBER " + relation);
}

CLI::Validator positive() { return at_least(0, true); }
CLI::Validator nonnegative() { return at_least(0, false); }

// The flag groups, in the order --help lists them.

void add_model_flags(CLI::App& app, TrainOptions& o) {
  const char* group = "Model";
  app.add_option("--model", o.model, "preset: tiny | gpt2-124m")->group(group);
  app.add_option("--layers", o.layers, "transformer blocks (L)")->check(positive())->group(group);
  app.add_option("--channels", o.channels, "embedding width (C)")->check(positive())->group(group);
  app.add_option("--heads", o.heads, "attention heads (NH)")->check(positive())->group(group);
  app.add_option("--max-seq-len", o.max_seq_len, "position embeddings (maxT)")->check(positive())->group(group);
  app.add_option("--vocab", o.vocab, "vocabulary size (V), padded to a multiple of 128")
      ->check(positive())->group(group);
}

void add_batch_flags(CLI::App& app, TrainOptions& o) {
  const char* group = "Batch";
  app.add_option("--batch-size", o.batch_size, "sequences per rank per micro-step (B)")
      ->check(positive())->capture_default_str()->group(group);
  app.add_option("--seq-len", o.seq_len, "tokens per sequence (T); default the model's max-seq-len")
      ->check(positive())->group(group);
  app.add_option("--steps", o.steps, "optimizer steps")->check(positive())->capture_default_str()->group(group);
  app.add_option("--seed", o.seed, "weight initialisation seed")->capture_default_str()->group(group);
  app.add_option("--grad-accum", o.grad_accum, "micro-steps per optimizer step (K)")
      ->check(positive())->capture_default_str()->group(group);
}

void add_optimizer_flags(CLI::App& app, TrainOptions& o) {
  const char* group = "Optimizer";
  app.add_option("--lr", o.lr, "peak learning rate")->check(nonnegative())->capture_default_str()->group(group);
  app.add_option("--beta1", o.beta1, "AdamW beta1")->check(CLI::Range(0.0f, 0.999999f))->capture_default_str()
      ->group(group);
  app.add_option("--beta2", o.beta2, "AdamW beta2")->check(CLI::Range(0.0f, 0.999999f))->capture_default_str()
      ->group(group);
  app.add_option("--eps", o.eps, "AdamW epsilon")->check(positive())->capture_default_str()->group(group);
  app.add_option("--weight-decay", o.weight_decay, "decoupled weight decay on 2-D weights")
      ->check(nonnegative())->capture_default_str()->group(group);
  app.add_option("--grad-clip", o.grad_clip, "clip the global gradient norm to this; 0 = off")
      ->check(nonnegative())->capture_default_str()->group(group);
  app.add_option("--warmup-steps", o.warmup_steps, "linear warmup steps")->check(nonnegative())
      ->capture_default_str()->group(group);
  app.add_option("--lr-schedule", o.lr_schedule, "constant | cosine")
      ->check(CLI::IsMember({"constant", "cosine"}))->capture_default_str()->group(group);
  app.add_option("--min-lr-ratio", o.min_lr_ratio, "cosine floor as a fraction of --lr")
      ->check(CLI::Range(0.0f, 1.0f))->capture_default_str()->group(group);
}

void add_io_flags(CLI::App& app, TrainOptions& o) {
  const char* group = "Data and checkpoints";
  app.add_option("--data", o.data, "glob of llm.c token shards (prepare-text makes one from text)")->group(group);
  app.add_option("--init-from", o.init_from, "start from this llm.c model checkpoint (fp32, version 3)")
      ->group(group);
  app.add_option("--save-every", o.save_every, "write model_<step>.bin + state_<step>.bin every N steps and at the "
                 "end; 0 = never")->check(nonnegative())->capture_default_str()->group(group);
  app.add_flag("--resume", o.resume, "continue from the newest complete checkpoint in --checkpoint-dir")
      ->group(group);
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "where checkpoints are written and resumed from")
      ->capture_default_str()->group(group);
  app.add_option("--metrics", o.metrics, "append one JSON object per step to this file (rank 0)")->group(group);
}

void add_precision_flags(CLI::App& app, TrainOptions& o) {
  const char* group = "Precision";
  app.add_option("--precision", o.precision, "fp32, or mixed precision: bf16 | fp16 (fp32 master weights and "
                 "AdamW state, 16-bit matrix products with fp32 accumulation)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str()->group(group);
  app.add_option("--loss-scale-init", o.loss_scale_init, "fp16: the first dynamic loss scale")
      ->check(positive())->capture_default_str()->group(group);
  app.add_option("--loss-scale-growth-interval", o.loss_scale_growth_interval,
                 "fp16: finite steps in a row before the loss scale doubles")
      ->check(positive())->capture_default_str()->group(group);
  app.add_option("--inject-inf-steps", o.inject_inf_steps, "fp16, for tests: put an inf into the gradients of "
                 "these 1-based steps (comma-separated)")
      ->delimiter(',')->check(positive())->group(group)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// The fp16-only flags given without fp16 would do nothing: refused (CLI::ValidationError, exit code 2).
void check_precision_flags(const CLI::App& app, const TrainOptions& o) {
  if (o.precision == "fp16") return;
  for (const char* flag : {"--loss-scale-init", "--loss-scale-growth-interval", "--inject-inf-steps"}) {
    if (app.count(flag) > 0)
      throw CLI::ValidationError(flag, std::string("applies to --precision fp16 only (this run is ") + o.precision +
                                           "); drop it or add --precision fp16");
  }
}

// Flags outside the groups: --help lists them under "Options".
void add_run_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--zero", o.zero, "sharding over the ranks: 0 = DDP (full replicas); 1 = optimizer state sharded "
                 "(ZeRO-1); 2 = also gradients (ZeRO-2); 3 = also parameters (ZeRO-3, FSDP FULL_SHARD)")
      ->check(CLI::Range(0, 3))->capture_default_str();
  app.add_option("--ddp-bucket-mb", o.ddp_bucket_mb,
                 "DDP gradient bucket size in MiB after the first 1 MiB bucket (PyTorch's bucket_cap_mb); default: "
                 "min(25, max(1, gradient MiB / 8)), so that the last bucket, which cannot overlap backward, stays "
                 "small")
      ->check(CLI::Range(0.0625, 4096.0));
  app.add_option("--ddp-comm-dtype", o.ddp_comm_dtype, "DDP gradient allreduce dtype (--zero 0): fp32, or bf16 / "
                 "fp16 as PyTorch's compress hooks (half the bytes on the wire)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  app.add_option("--param-dtype", o.param_dtype, "--zero 1..3 parameter all-gather dtype: fp32 (the whole fp32 "
                 "master on every rank at stages 1-2), or the --precision (the default; half the bytes with bf16 / "
                 "fp16, the master sharded)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--reduce-dtype", o.reduce_dtype, "--zero 1..3 gradient reduce-scatter dtype: fp32, or bf16 / fp16 "
                 "(half the bytes on the wire; gradients stay fp32 on each rank)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  app.add_option("--tp", o.tp, "tensor-parallel size: each group of --tp consecutive ranks splits every block's "
                 "heads, MLP and the vocabulary (CPU; with --zero 0..3 when --pp is 1); DP = world / (TP x PP)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--pp", o.pp, "pipeline-parallel size: the layers split into --pp stages (CPU; with --zero 0 or 1), "
                 "--grad-accum micro-batches through them; DP = world / (TP x PP)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--pp-schedule", o.pp_schedule, "pipeline schedule: gpipe (every forward, then every backward) or "
                 "1f1b (one forward, one backward: at most --pp micro-batches' activations kept)")
      ->check(CLI::IsMember({"gpipe", "1f1b"}))->capture_default_str();
  app.add_option("--pp-virtual", o.pp_virtual, "model chunks per pipeline stage: above 1, interleaved 1F1B (stage s "
                 "holds chunks s, s + PP, ...; the bubble is 1/V as large; --grad-accum must divide by --pp)")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_flag("--sequence-parallel", o.sequence_parallel, "with --tp: LayerNorms and residual adds on 1/TP of the "
               "tokens each, all-gathers and reduce-scatters in place of the allreduces (less activation memory)");
  app.add_flag("--allow-cross-node-tp", o.allow_cross_node_tp, "accept a tensor-parallel group that spans nodes");
  app.add_option("--recompute", o.recompute, "activation recomputation: none, selective (attention's probabilities "
                 "recomputed in backward, one layer kept) or full (each block's forward again before its backward; "
                 "only the blocks' inputs kept)")
      ->check(CLI::IsMember({"none", "selective", "full"}))->capture_default_str();
  app.add_flag("--dry-run", o.dry_run, "print the model and each rank's TP/DP/PP coordinates and groups (world from "
               "WORLD_SIZE and LOCAL_WORLD_SIZE), then exit without training; --data is not needed");
  app.add_option("--device", o.device, "where to compute: cpu, cuda (GPU LOCAL_RANK; gradients over NCCL) or auto "
                 "(cuda when a GPU is visible, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads; 0 = OMP_NUM_THREADS, else all cores")
      ->check(nonnegative())->capture_default_str();
  app.add_option("--log-every", o.log_every, "print a console line every N steps (rank 0)")
      ->check(positive())->capture_default_str();
  app.add_option("--debug-stall-step", o.debug_stall_step, "for tests: stop before step N (1-based) for ever, "
                 "health heartbeats going on, as a hung collective would; 0 = never")
      ->check(nonnegative())->capture_default_str();
  app.add_option("--debug-stall-rank", o.debug_stall_rank, "for tests: with --debug-stall-step, only this rank "
                 "stops (the others then wait for it in the step's first collective); -1 = every rank")
      ->check(CLI::Range(-1, 1 << 30))->capture_default_str();
}

}  // namespace

Command parse_command_line(int argc, char** argv) {
  Command command;
  TrainOptions& o = command.train;
  PrepareTextArgs prepare;

  CLI::App app{"dtrain-trainer: GPT-2 training on CPU (OpenBLAS + OpenMP) or a CUDA GPU, data parallel over Gloo / "
               "shared memory (CPU) or NCCL (GPU) when started by dtrain or torchrun",
               "dtrain-trainer"};
  app.require_subcommand(0, 1);
  // A flag given twice takes its last value, so a wrapper script's defaults can be overridden by appending.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(app, o);
  add_batch_flags(app, o);
  add_optimizer_flags(app, o);
  add_io_flags(app, o);
  add_precision_flags(app, o);
  add_run_flags(app, o);

  CLI::App* prepare_cmd = app.add_subcommand("prepare-text", "convert a text file to a token shard: one token per "
                                             "byte (vocabulary 256), llm.c's shard format");
  prepare_cmd->add_option("input", prepare.input, "text file to read")->required();
  prepare_cmd->add_option("output", prepare.output, "token shard to write")->required();
  GemmRateArgs gemm;
  CLI::App* gemm_cmd = app.add_subcommand("gemm-rate", "measure the fp32 GEMM rate of the training kernels (one JSON "
                                          "line; dtrain doctor runs this and caches it for CPU ranks' MFU)");
  gemm_cmd->add_option("--threads", gemm.threads, "CPU threads; 0 = OMP_NUM_THREADS, else all cores")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  gemm_cmd->add_option("--size", gemm.size, "M = N = K of the product")->check(CLI::Range(16, 8192))
      ->capture_default_str();

  try {
    app.parse(argc, argv);
    if (prepare_cmd->parsed()) {
      command.prepare_text = prepare;
    } else if (gemm_cmd->parsed()) {
      command.gemm_rate = gemm;
    } else if (o.data.empty() && !o.dry_run) {
      throw CLI::RequiredError("--data");
    } else {
      check_precision_flags(app, o);
    }
  } catch (const CLI::CallForHelp& e) {
    command.exit_code = app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    command.exit_code = 2;
  }
  return command;
}

}  // namespace dtrain::trainer
