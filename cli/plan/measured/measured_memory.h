#pragma once

// The memory of a job's ranks as its run directory records it, for `dtrain plan --from` (measured_run.h):
//   samples (events.jsonl)  rss_mib and device_mib of every rank, the peak of each window (samples.h): resident and
//                           device memory in use
//   status.json rank rows   the launcher's last snapshot (cli/controller/observe/job_status.h): rss_bytes,
//                           device_mem_used_bytes, device_mem_peak_bytes (PyTorch's max_memory_allocated, sent by
//                           `instrument: auto` and dtrain_health) and device_mem_total_bytes; and the model states
//                           mem_params_bytes, mem_grads_bytes, mem_optim_bytes, mem_activations_bytes, the keys of a
//                           health report (README "Worker health") wherever a row carries them
//   dtrain-trainer's log    attempt_<round>/rank_<r>.log's first line: the model's shape, parameter count and batch,
//                           from which an fp32 job's model states follow (README "--zero"'s table)
// Each value is the largest over the ranks: the rank that runs out first decides. A file that is missing, damaged or
// not a regular file adds nothing; the advice is still given from the rest.

#include <cstdint>
#include <string>

#include "cli/plan/measured/measured_run.h"
#include "cli/report/model/run_model.h"

namespace dtrain::plan {

// The most of a rank's log read for its first line: the line is the trainer's first, a few hundred bytes in.
inline constexpr std::size_t kMaxTrainerLogBytes = 64 << 10;

// The memory of the ranks in `round`'s samples and in status.json's rows; model states as reported (or none).
MeasuredMemory read_memory(const report::RunModel& model, std::uint32_t round);

// dtrain-trainer's model from the log of `round`'s lowest rank that has one; all 0 when none states it.
TrainerModel read_trainer_model(const std::string& dir, std::uint32_t round);

// The first "model L=..." line's values in `log`; all 0 when it has none.
TrainerModel parse_trainer_model(const std::string& log);

// An fp32 dtrain-trainer job's model states at its --zero stage over `ranks`, from its parameter count, when the run
// reported none (README "--zero": 4P, 4P and 8P, stage s sharding the optimizer state from 1, the gradients from 2,
// the parameters at 3). Nothing changes for other jobs or without a parameter count.
void derive_trainer_states(MeasuredRun& run);

}  // namespace dtrain::plan
