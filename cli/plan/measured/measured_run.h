#pragma once

// `dtrain plan --from RUN_DIR`: the advice a plan gives, from a job that ran instead of from a model's shape. It reads
// the job's run directory (events.jsonl's samples, as `dtrain report` does: cli/report/model/run_model.h) for the
// measured world, step time, tokens/s and where a step's time went (data wait, compute, exposed communication,
// optimizer), and its memory per rank (measured_memory.h), names the bottleneck, the part that takes the largest share
// of a step, and lists the remedies that apply (remedies.h), each with its predicted gain and the lines to change:
// Python for a script, flags and job-spec keys for dtrain-trainer.
//
// The measures are the medians over every rank's samples of the job's last round (so a restart's first attempt does
// not count). When the launcher diagnosed stragglers (status.json), the others' exposed communication is their
// waiting for them: the measures are then the stragglers' own, and the bottleneck the largest part of their own work.
// A part under 10% of the step gets no remedy. A predicted gain is an upper bound from the measure itself, never a
// guess beyond it; a remedy whose gain the measurement cannot bound says so instead of giving a number:
//   data wait      a loader that keeps ahead hides the wait behind compute: up to the whole wait
//   exposed comm   gradient accumulation over k micro-steps reduces once per k: (k - 1)/k of it per sample (k = 4);
//                  smaller gradient buckets start the reduction earlier in backward: up to what backward can hide
//                  (half of it, at most);
//                  on several nodes, each rank on its nearest NIC (`dtrain topo`; the job spec's `nccl: {auto: true}`
//                  sets NCCL_IB_HCA, `nodes: {interface: ...}` NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME): no gain
//                  claimed, the measurement does not say which link the communication crossed;
//                  on several nodes with a large model, tensor/pipeline parallelism (Narayanan et al., SC21,
//                  arXiv:2104.04473: tensor parallelism within a node, pipeline across nodes, data parallelism for
//                  the rest): `dtrain plan` with the job's own world, ranks per node, precision, batch and model
//                  (the shape from dtrain-trainer's log; a script's parameter count is not recorded and the line
//                  says so) gives the layout; dtrain-trainer has no TP/PP. No gain claimed: moving the data-parallel
//                  traffic within nodes removes at most the whole exposed communication, and the measurement does
//                  not split it between the nodes' links and the network. "Large": more than 1.7e9 parameters, the
//                  largest model of their Table 1 trained with data parallelism alone (from 3.6e9 every row uses
//                  tensor parallelism); a model whose size is not recorded gets the remedy, saying so
//   optimizer      ZeRO-1 shards the update over the N data-parallel ranks: (N - 1)/N of it
//   compute        bf16 mixed precision: up to half the compute on hardware with 16-bit matrix units (a GPU's tensor
//                  cores, a CPU's AMX or AVX-512 BF16), nothing where there are none; only when the job is fp32
//   memory         ZeRO (Rajbhandari et al., arXiv:1910.02054) shards over the N data-parallel ranks the optimizer
//                  state (stage 1), also the gradients (stage 2), also the parameters (stage 3), each sharded part
//                  kept 1/N per rank: stage s frees (N - 1)/N of each part it shards that the job does not shard
//                  already, from the model-state bytes of the run (measured_memory.h). A stage is listed when it frees
//                  at least 10% of the rank's memory (its device peak, else device memory in use, else resident
//                  memory); stages 1 and 2 communicate as much as DDP, stage 3 1.5x (the paper's communication
//                  analysis). Lines: `--zero S` for dtrain-trainer; ZeroRedundancyOptimizer (1) or
//                  FullyShardedDataParallel with SHARD_GRAD_OP (2) or FULL_SHARD (3) for a script. The freed memory
//                  holds a larger micro-batch: how much larger only when the run reports its activations
//                  (mem_activations_bytes) and its micro-batch, taking activations as linear in it (Korthikanti et
//                  al., arXiv:2205.05198)
// Time remedies come first, largest gain first, then memory remedies, most memory freed first.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace dtrain::plan {

// dtrain-trainer's model and batch as the first line of its log states them (trainer/train/loop.cpp: "model L=.. C=..
// NH=.. maxT=.. V=.. Vp=.. (P parameters), batch B x seq T x world W x accum K = ..."); all 0 when not found.
struct TrainerModel {
  std::uint64_t params = 0;  // without ZeRO's padding
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int max_seq_len = 0;
  int vocab = 0;
  int batch = 0;             // sequences per rank per micro-step
  int seq_len = 0;           // tokens per sequence
  int grad_accum = 0;        // micro-steps per optimizer step
};

// Where the model-state bytes of MeasuredMemory come from.
enum class StatesSource {
  not_recorded,  // neither reported nor derivable (a script's reports carry none; a 16-bit dtrain-trainer job)
  reported,      // the ranks' own mem_params/grads/optim_bytes, in status.json's rank rows
  derived,       // dtrain-trainer in fp32: README "--zero"'s table (4P, 4P, 8P, sharded by its stage) from the P of
                 //   its log; the padded count it would report differs by less than N values per unit
};

// One rank's memory, the largest over the ranks (the rank that runs out first); bytes, 0 = not reported.
struct MeasuredMemory {
  std::uint64_t rss_bytes = 0;           // the process's resident memory (samples' rss_mib, status.json)
  std::uint64_t device_used_bytes = 0;   // the accelerator's memory in use (PyTorch: memory_reserved)
  std::uint64_t device_peak_bytes = 0;   // the most its tensors held (max_memory_allocated; status.json only)
  std::uint64_t device_total_bytes = 0;  // the accelerator's whole memory
  StatesSource states = StatesSource::not_recorded;
  std::uint64_t params_bytes = 0;        // what the rank holds, at the job's own ZeRO stage
  std::uint64_t grads_bytes = 0;
  std::uint64_t optim_bytes = 0;
  std::uint64_t activations_bytes = 0;   // reported only

  std::uint64_t states_bytes() const { return params_bytes + grads_bytes + optim_bytes; }
  // What the rank's memory is measured as: its device peak, else device memory in use, else resident memory.
  std::uint64_t rank_bytes() const;
};

struct MeasuredRun {
  std::string dir;
  std::string job_id;
  bool trainer = false;          // the command is dtrain-trainer's
  std::string precision;         // dtrain-trainer's --precision (fp32 when not given); "" for other programs
  int zero_stage = 0;            // dtrain-trainer's --zero (0 when not given); a script's is taken as 0 (DDP)
  std::size_t ranks = 0;
  std::size_t nodes = 0;
  std::size_t ranks_per_node = 0;  // the most ranks any node ran
  std::size_t samples = 0;       // (rank, window) samples the medians are of
  double step_ms = 0;
  double data_wait_ms = 0;
  double compute_ms = 0;
  double comm_exposed_ms = 0;
  double optimizer_ms = 0;
  double tokens_per_s = 0;       // the job's: the ranks' median times the ranks
  TrainerModel model;            // dtrain-trainer's, from its log; all 0 for other programs
  MeasuredMemory memory;
};

struct Remedy {
  std::string what;
  double gain_ms = 0;                 // predicted time saved per step, at most; 0 = none claimed
  std::uint64_t frees_bytes = 0;      // a memory remedy's gain: memory freed per rank, at most; 0 for time remedies
  std::string note;                   // when no gain is claimed: why, and what bounds it
  std::vector<std::string> lines;     // what to change

  bool is_memory() const { return frees_bytes > 0; }
};

struct RunAdvice {
  MeasuredRun run;
  std::vector<unsigned> stragglers;   // the launcher's straggler diagnosis; run is then these ranks' own samples
  std::string bottleneck;             // "data", "communication", "optimizer", "compute"
  double bottleneck_share = 0;        // of the step
  std::vector<Remedy> remedies;       // time remedies, largest gain first, then memory remedies, most freed first
};

// Reads `dir` and advises; fails naming the directory when it is not a run directory or holds no step samples.
Result<RunAdvice> advise_from_run(const std::string& dir);

std::string render_advice_text(const RunAdvice& advice);
std::string render_advice_json(const RunAdvice& advice);

}  // namespace dtrain::plan
