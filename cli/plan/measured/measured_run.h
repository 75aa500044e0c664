#pragma once

// `dtrain plan --from RUN_DIR`: the advice a plan gives, from a job that ran instead of from a model's shape. It reads
// the job's run directory (events.jsonl's samples, as `dtrain report` does: cli/report/model/run_model.h) for the
// measured world, step time, tokens/s and where a step's time went (data wait, compute, exposed communication,
// optimizer), names the bottleneck, the part that takes the largest share of a step, and lists the remedies that
// apply to it, each with its predicted gain and the lines to change: Python for a script, flags for dtrain-trainer.
//
// The measures are the medians over every rank's samples of the job's last round (so a restart's first attempt does
// not count). When the launcher diagnosed stragglers (status.json), the others' exposed communication is their
// waiting for them: the measures are then the stragglers' own, and the bottleneck the largest part of their own work. A predicted gain is an upper bound from the measure itself, never a guess beyond it:
//   data wait      a loader that keeps ahead hides the wait behind compute: up to the whole wait
//   exposed comm   gradient accumulation over k micro-steps reduces once per k: (k - 1)/k of it per sample (k = 4);
//                  smaller gradient buckets start the reduction earlier in backward: up to what backward can hide
//   optimizer      ZeRO-1 shards the update over the N data-parallel ranks: (N - 1)/N of it
//   compute        bf16 mixed precision: up to half the compute on hardware with 16-bit matrix units (a GPU's tensor
//                  cores, a CPU's AMX or AVX-512 BF16), nothing where there are none; only when the job is fp32

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace dtrain::plan {

struct MeasuredRun {
  std::string dir;
  std::string job_id;
  bool trainer = false;          // the command is dtrain-trainer's
  std::string precision;         // dtrain-trainer's --precision (fp32 when not given); "" for other programs
  std::size_t ranks = 0;
  std::size_t nodes = 0;
  std::size_t samples = 0;       // (rank, window) samples the medians are of
  double step_ms = 0;
  double data_wait_ms = 0;
  double compute_ms = 0;
  double comm_exposed_ms = 0;
  double optimizer_ms = 0;
  double tokens_per_s = 0;       // the job's: the ranks' median times the ranks
};

struct Remedy {
  std::string what;
  double gain_ms = 0;                 // predicted, per step, at most
  std::vector<std::string> lines;     // what to change
};

struct RunAdvice {
  MeasuredRun run;
  std::vector<unsigned> stragglers;   // the launcher's straggler diagnosis; run is then these ranks' own samples
  std::string bottleneck;             // "data", "communication", "optimizer", "compute"
  double bottleneck_share = 0;        // of the step
  std::vector<Remedy> remedies;       // largest gain first
};

// Reads `dir` and advises; fails naming the directory when it is not a run directory or holds no step samples.
Result<RunAdvice> advise_from_run(const std::string& dir);

std::string render_advice_text(const RunAdvice& advice);
std::string render_advice_json(const RunAdvice& advice);

}  // namespace dtrain::plan
