#pragma once

// One trial of `dtrain tune` in dtrain-trainer: the worker's side of the protocol cli/tune/trial.h defines.
//
// With DTRAIN_TUNE_TRIAL={"warmup":W,"steps":N,"losses":K} in its environment the trainer runs W + N optimizer steps
// whatever --steps says (as if it said W + N, the learning-rate schedule included), from a fresh start (--resume is
// ignored) and without checkpoints (--save-every is ignored; rank 0 says so once on stderr when either was given).
// Then every rank writes one line to stderr and exits 0:
//
//   dtrain-trial: {"rank":0,"steps":6,"complete":true,"device":"cpu","step_s":[...],"data_wait_s":...,...}
//
// with cli/tune/trial.h's fields. The loop measures each step as it ends (TrialRun::record, right after the
// optimizer step): step_s is the time since the end of the step before (the loop's whole iteration: the data, the
// report and console line of the step before, forward, backward, communication, optimizer; the process's first step
// counts from train_step's own start), data_wait_s and comm_s the step's StepTimes::data_wait_ms and
// StepMetrics::comm_exposed_ms (0 on one rank), samples B*K and tokens B*K*T a step; losses are StepMetrics::loss,
// what the console and --metrics print. The rest is read when the line is written: rss_bytes the peak resident set
// (getrusage), cpus the affinity's count, threads the OpenMP threads (kernels::cpu_threads); loader and ddp are null
// (a script's), trainer holds --ddp-bucket-mb as DDP uses it (the computed default without the flag, 0 without DDP:
// one rank or --zero) and the communicator's backend (local, gloo, shm, hier, nccl).
//
// A run that ends otherwise (a failure: exit 1 or 2, or fewer steps) writes the line with "complete":false and the
// steps it made, and exits as it would have; before its first step "trainer" is null (no communicator yet). A value
// of DTRAIN_TUNE_TRIAL that is not such an object (strictly: those three members, whole numbers, W >= 0, N >= 1,
// 0 <= K <= W + N, nothing else) is a bad option: exit 2, the message naming the variable and what is wrong.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/ckpt/state_file.h"
#include "trainer/comm/communicator.h"
#include "trainer/metrics/jsonl.h"
#include "trainer/metrics/step_times.h"
#include "trainer/train/options.h"

namespace dtrain::trainer {

inline constexpr char kTrialEnv[] = "DTRAIN_TUNE_TRIAL";
inline constexpr std::string_view kTrialPrefix = "dtrain-trial: ";

// DTRAIN_TUNE_TRIAL's value.
struct TrialPlan {
  long warmup = 0;  // W: steps before the measured ones
  long steps = 1;   // N: measured steps
  long losses = 0;  // K: the first steps whose loss the line keeps
  long total() const { return warmup + steps; }
};

// Parses `value`; throws std::invalid_argument "DTRAIN_TUNE_TRIAL='VALUE' is not a trial: WHAT; ...".
TrialPlan parse_trial_plan(std::string_view value);

// The plan in the environment; nothing when DTRAIN_TUNE_TRIAL is unset. Throws as parse_trial_plan.
std::optional<TrialPlan> trial_plan_from_env();

// What the line says (cli/tune/trial.h).
struct TrialReport {
  int rank = 0;
  long steps = 0;
  bool complete = false;
  std::string device = "cpu";  // "cpu" or "cuda" (--device)
  std::vector<double> step_s;
  double data_wait_s = 0;
  double comm_s = 0;
  std::uint64_t samples = 0;
  std::uint64_t tokens = 0;
  std::vector<double> losses;
  std::uint64_t rss_bytes = 0;
  int cpus = 0;
  int threads = 0;
  bool described = false;  // ddp_bucket_mb and backend known (after the first step); else "trainer" is null
  double ddp_bucket_mb = 0;
  std::string backend;
};

// "dtrain-trial: {...}" without a newline. Numbers with 9 significant digits (a float's loss round-trips); a number
// that is not finite is null.
std::string trial_line(const TrialReport& report);

// One run's trial, or nothing (DTRAIN_TUNE_TRIAL unset: every call below does nothing).
class TrialRun {
 public:
  TrialRun() = default;
  // Reads DTRAIN_TUNE_TRIAL (throws std::invalid_argument as parse_trial_plan) and makes the run's options.
  explicit TrialRun(const TrainOptions& options);

  // The options to train with: the given ones, or in a trial --steps W + N, no --save-every, no --resume.
  const TrainOptions& options() const { return options_; }
  // After each optimizer step (train_step's return): its metrics and times; `comm` and `shape` say the rank, the
  // backend and the batch. `windowed`: the step was read with others after the fact (a device's window,
  // report/step_window.h), so its time is m.step_ms rather than the time since the last record.
  void record(const StepMetrics& m, const StepTimes& times, const Communicator& comm, const TrainState& shape,
              bool windowed = false);
  // Where the rank computes: "cpu" (the default) or "cuda".
  void set_device(const std::string& device) { report_.device = device; }
  // At the run's end with its exit code: writes the line to stderr (once), complete when the code is 0 and every
  // step was made; returns `code`.
  int end(int code);

  const TrialReport& report() const { return report_; }

 private:
  using Clock = std::chrono::steady_clock;
  void describe(const Communicator& comm, const TrainState& shape);

  std::optional<TrialPlan> plan_;
  TrainOptions options_;
  TrialReport report_;
  Clock::time_point last_end_;
};

}  // namespace dtrain::trainer
