#pragma once

// One trial of `dtrain tune`: the job run for a few optimizer steps, and what each rank says of them.
//
// The protocol between `dtrain tune` and a worker. The launcher gives every worker of a trial
//
//   DTRAIN_TUNE_TRIAL={"warmup":W,"steps":N,"losses":K}
//
// (W >= 0 warm-up steps, N >= 1 measured steps, K <= W + N first steps whose loss is kept). A worker that knows it,
// dtrain's PyTorch bootstrap (worker/python/bootstrap/_dtrain_trial.py) or dtrain-trainer (trainer/train/trial.h),
// counts its optimizer steps and, right after the (W + N)-th returns, writes one line to stderr and exits 0 at once:
//
//   dtrain-trial: {"rank":R,"steps":S,"complete":true,"device":"cpu",
//                  "step_s":[N numbers],"data_wait_s":x,"comm_s":y,"samples":n|null,"tokens":n|null,
//                  "losses":[K numbers|null],"rss_bytes":n,"device_peak_bytes":n,"cpus":c,"threads":t,
//                  "loader":{"num_workers":0,"pin_memory":false,"prefetch_factor":null,"persistent_workers":false}|null,
//                  "ddp":{"bucket_cap_mb":25,"gradient_as_bucket_view":false}|null,
//                  "trainer":{"ddp_bucket_mb":m,"backend":"gloo"}|null}
//
//   step_s        the wall time of each measured step W+1 .. W+N: the end of its optimizer step minus the end of the
//                 one before (the whole loop: data, forward, backward, communication, optimizer)
//   data_wait_s   seconds of the measured steps spent waiting for data (DataLoader iterators / the trainer's loader)
//   comm_s        seconds of the measured steps spent in exposed communication (blocking collectives, DDP's wait)
//   samples, tokens  what the measured steps consumed on this rank (null where not counted)
//   losses        the loss of steps 1 .. K (null for a step whose loss is not known)
//   rss_bytes     the process's peak resident memory; device_peak_bytes the accelerator's peak (0 without one)
//   cpus          the CPUs the rank may run on (its affinity); threads its intra-op threads
//   loader        the effective arguments of the first DataLoader the script built (after any overlay); null if none
//   ddp           the effective arguments of the first DistributedDataParallel; null if none
//   trainer       dtrain-trainer's own knobs as it ran; null for a script
//
// A worker that ends before step W + N (it returned, raised, or called exit) writes the same line with
// "complete":false and the steps it made (step_s then holds the measured steps it finished), and exits as it would
// have. A worker killed by a signal writes nothing: the trial is then failed by its exit.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::tune {

inline constexpr std::string_view kTrialLinePrefix = "dtrain-trial: ";

struct TrialSettings {
  int warmup = 10;
  int steps = 30;
  int losses = 5;
};

// DTRAIN_TUNE_TRIAL's value.
std::string trial_env_value(const TrialSettings& settings);

struct RankTrial {
  int rank = -1;
  int steps = 0;
  bool complete = false;
  std::string device = "cpu";
  std::vector<double> step_s;
  double data_wait_s = 0;
  double comm_s = 0;
  std::optional<double> samples;
  std::optional<double> tokens;
  std::vector<std::optional<double>> losses;
  double rss_bytes = 0;
  double device_peak_bytes = 0;
  int cpus = 0;
  int threads = 0;
  std::string loader_json;   // the "loader" object as written, "" for null
  std::string ddp_json;      // the "ddp" object, "" for null
  std::string trainer_json;  // the "trainer" object, "" for null
  std::optional<int> loader_num_workers;
  std::optional<bool> loader_pin_memory;
  std::optional<bool> loader_persistent_workers;
  std::optional<int> loader_prefetch_factor;
  std::optional<double> ddp_bucket_cap_mb;
  std::optional<bool> ddp_gradient_as_bucket_view;
  std::optional<double> trainer_bucket_mb;
  std::string trainer_backend;
};

// Parses the JSON after kTrialLinePrefix; nothing when it is not a trial line's object (damaged or hostile output
// costs nothing but the line).
std::optional<RankTrial> parse_trial_line(std::string_view json);

// The last trial line of each rank found in `text` (a rank log or a console capture, whose lines may start with a
// "[R] " prefix), by rank.
std::vector<RankTrial> find_trial_lines(std::string_view text);

}  // namespace dtrain::tune
