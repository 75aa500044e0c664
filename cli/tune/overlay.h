#pragma once

// A tune overlay (`--tune tune.yaml` on `dtrain run` and `dtrain launch`): remedies applied to an unmodified PyTorch
// script with no change to its code. The file is one YAML document:
//
//   tune:
//     dataloader: {num_workers: 4, pin_memory: true, prefetch_factor: 2, persistent_workers: true}
//     ddp: {bucket_cap_mb: 25, gradient_as_bucket_view: true}
//     threads: {intra_op: 2}
//     env: {NCCL_ALGO: Ring, PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
//     binding: none
//     allow_numerics: false
//     numerics: {}
//
// Every key is optional; each one given does what it says, and anything else is refused (SpecError, exit 2, naming
// the file, line, key and what is accepted):
//   dataloader.*  every torch.utils.data.DataLoader the script builds gets these arguments instead of its own
//                 (worker/python/bootstrap/_dtrain_tune.py, at construction; torch's rules are kept there);
//   ddp.*         every DistributedDataParallel the script builds gets these arguments instead of its own;
//   threads.intra_op  torch.set_num_threads(N) when the bootstrap arms (at `import torch`);
//   env.NAME      NAME=value in every worker's environment, over the spec's env (plan.cpp, layer 4): only NCCL_*
//                 and PYTORCH_CUDA_ALLOC_CONF, which tune performance without changing what is computed;
//   binding       the job's `binding:` (auto | none): how dtrain pins workers to CPUs, for any program;
//   numerics      knobs that change the numbers (mixed precision, TF32, batch size, accumulation, static_graph):
//                 none is implemented yet, so any key under it is refused; without `allow_numerics: true` the
//                 refusal says that such knobs need it. An empty `numerics:` changes nothing.
// The first three groups are the bootstrap's ("Python knobs"): they need health.instrument: auto and a worker
// command that runs Python (agent/job/python_command.h), and are refused otherwise (dtrain-trainer has no such
// knobs: it is not a PyTorch script). The env knobs and binding work for any program.

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "cli/spec/spec.h"

namespace dtrain::tune {

// The overlay as read; an unset optional leaves the script's own value.
struct Overlay {
  std::string file;  // the path it was read from, for messages

  struct DataLoader {
    std::optional<int> num_workers;          // 0 to kMaxNumWorkers
    std::optional<bool> pin_memory;
    std::optional<int> prefetch_factor;      // 1 to kMaxPrefetchFactor; applies only where num_workers > 0
    std::optional<bool> persistent_workers;  // applies only where num_workers > 0
  } dataloader;

  struct Ddp {
    std::optional<double> bucket_cap_mb;  // > 0 and at most kMaxBucketCapMb
    std::optional<bool> gradient_as_bucket_view;
  } ddp;

  std::optional<int> intra_op_threads;  // threads.intra_op: 1 to kMaxThreads

  std::map<std::string, std::string> env;  // names allowed by env_allowed()

  std::optional<spec::Binding> binding;    // the job's binding: instead of the spec's

  bool allow_numerics = false;  // numerics knobs may be asked for (none is implemented, see above)
};

inline constexpr int kMaxNumWorkers = 256;
inline constexpr int kMaxPrefetchFactor = 1024;
inline constexpr double kMaxBucketCapMb = 65536;
inline constexpr int kMaxThreads = 4096;
inline constexpr std::size_t kMaxOverlayBytes = 64 * 1024;  // a tune.yaml is a few lines
inline constexpr std::size_t kMaxEnvValueBytes = 4096;

// Whether an overlay may set this environment variable: NCCL_<NAME> or PYTORCH_CUDA_ALLOC_CONF.
bool env_allowed(std::string_view name);

// Reads `yaml` (the text of `file`). Throws spec::SpecError naming every problem found.
Overlay parse_overlay(std::string_view yaml, const std::string& file);

// Reads the file at `path` (a regular file of at most kMaxOverlayBytes). Throws spec::SpecError.
Overlay load_overlay_file(const std::string& path);

// Whether the overlay has a knob the PyTorch bootstrap applies (dataloader, ddp, threads).
bool has_python_knobs(const Overlay& overlay);

// DTRAIN_TUNE's value: the Python knobs as compact JSON, with the file's base name for the bootstrap's message:
// {"file":"tune.yaml","dataloader":{"num_workers":4},"ddp":{"bucket_cap_mb":25},"threads":{"intra_op":2}}.
// At most a few hundred bytes (the file name is cut to 200).
std::string python_knobs_json(const Overlay& overlay);

// Puts the overlay into `spec` (spec.tune_env: DTRAIN_TUNE when it has Python knobs, and its env knobs). Refuses,
// with a SpecError whose message says why and what to do, Python knobs for a job whose health.instrument is off or
// whose command does not run Python. `spec` is valid (validate() passed).
void apply_overlay(const Overlay& overlay, spec::Spec& spec);

}  // namespace dtrain::tune
