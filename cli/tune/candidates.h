#pragma once

// What `dtrain tune` tries: the baseline's measured facts (its trial lines, trial.h) and the candidates chosen from
// them. A part of the step gets candidates when it takes at least kWorthShare of it (10%, as `dtrain plan --from`);
// each candidate changes only what cannot change the numbers computed (cli/tune/overlay.h: knobs that do are never
// tried). For a PyTorch script, through the bootstrap's overlay:
//   data wait      num_workers: the powers of two up to the CPUs the rank may run on (its affinity, the binding
//                  dtrain gave it) and those CPUs themselves, above the script's own value, the largest two; then the
//                  largest with prefetch_factor 4 and persistent_workers; on a GPU each with pin_memory. A loader that
//                  has every CPU already gets prefetch_factor 4 and persistent_workers. No DataLoader: nothing.
//   exposed comm   DDP bucket_cap_mb of 1, 5, 25 and 100 MB but the script's own, the two nearest it (by ratio);
//                  gradient_as_bucket_view where it is off (no DDP: none of these); on a GPU, NCCL_ALGO=Ring and
//                  NCCL_ALGO=Tree (NCCL's model picks one by size; each forced is tried).
//   compute        intra-op threads equal to the rank's CPUs, where torch runs another number; where dtrain binds
//                  several ranks of a node to their own CPUs (binding: auto), `binding: none`: the ranks' threads and
//                  their DataLoader workers, which inherit the rank's CPUs, may then run on any; on a GPU,
//                  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. (The GPU candidates have not run on a GPU.)
// For dtrain-trainer, through its command line and environment (it has no bootstrap):
//   exposed comm   --ddp-bucket-mb 1, 4 and 25 but its own, the two nearest it; the other communication backend (DTRAIN_COMM_BACKEND:
//                  shm and gloo on one node, hier and gloo across nodes);
//   compute        --threads equal to the rank's CPUs, where it runs another number; `binding: none` as above.
// Candidates come bottleneck first, then by the other parts' shares.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/tune/overlay.h"
#include "cli/tune/trial.h"

namespace dtrain::tune {

inline constexpr double kWorthShare = 0.10;

// The baseline as its first trial measured it: the median over ranks.
struct JobFacts {
  bool trainer = false;
  bool cuda = false;
  int ranks = 0;
  int nodes = 1;
  bool bound = false;      // the job's binding is auto
  int cpus = 0;            // the fewest any rank may run on
  int threads = 0;
  double data_share = 0;   // of the measured steps' time
  double comm_share = 0;
  double compute_share = 0;
  bool has_loader = false;
  int loader_workers = 0;
  bool loader_pin = false;
  bool has_ddp = false;
  double bucket_cap_mb = 25;
  bool bucket_view = false;
  double trainer_bucket_mb = 0;
  std::string trainer_backend;

  // "data", "communication" or "compute": the largest share.
  std::string bottleneck() const;
};

// From the ranks' trial lines of one trial (at least one).
JobFacts job_facts(const std::vector<RankTrial>& ranks, bool trainer, int nodes);

struct Candidate {
  std::string name;                          // "num_workers=1, persistent_workers"; "baseline" for the baseline
  std::string part;                          // data, communication, compute ("" for the baseline)
  Overlay overlay;                           // a script's knobs
  std::map<std::string, std::string> env;    // dtrain-trainer's variables
  std::vector<std::string> args;             // dtrain-trainer's flags, with their values: {"--threads", "2"}
};

// `parts` (dtrain tune --parts): only these parts' candidates, whatever their share; empty: every part of at least
// kWorthShare.
std::vector<Candidate> choose_candidates(const JobFacts& facts, const std::set<std::string>& parts = {});

// `command` with each of `args`' flags set to its value (replacing the flag where the command has it, as
// "--flag value" or "--flag=value"; appended otherwise).
std::vector<std::string> with_flags(std::vector<std::string> command, const std::vector<std::string>& args);

}  // namespace dtrain::tune
