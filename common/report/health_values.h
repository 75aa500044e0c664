#pragma once

// The values of a worker's health report, as plain C++: one member per field of report.proto's WorkerReport, of the
// same name and meaning (report.proto says what each is; 0 or empty: not known). The worker's client sends them
// (worker/report/report_client.h: HealthReport), the launcher keeps them (cli/controller/session/session_messages.h:
// WorkerHealth), and report_fields.h converts them from and to the message, field by field, in one table. No
// protobuf here: domain headers include this one.

#include <cstdint>
#include <string>
#include <vector>

#include "common/report/grid_place.h"
#include "common/report/step_points.h"

namespace dtrain {

struct HealthValues {
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;
  double samples_per_s = 0;             // batch elements per second, over all micro-steps
  std::uint64_t rss_bytes = 0;
  std::uint64_t steps_done = 0;         // steps this process completed (0: none yet)
  // Where the last completed step's time went, in milliseconds of wall time.
  double step_ms = 0;
  double data_wait_ms = 0;              // blocked waiting for the next batch
  double compute_ms = 0;                // forward + backward, less exposed communication
  double comm_exposed_ms = 0;           // communication not hidden behind compute
  double optimizer_ms = 0;              // clip, update, refresh or gather of the working copy
  double pipeline_bubble_ms = 0;        // a pipeline stage's waits for its neighbours (in none of the above)
  std::uint64_t device_mem_used_bytes = 0;
  std::uint64_t device_mem_total_bytes = 0;
  std::uint64_t device_mem_peak_bytes = 0;  // the most its tensors held (torch.cuda.max_memory_allocated)
  std::string phase;                    // what it is doing now ("allreduce bucket 3")
  // What it holds (the --metrics line's mem_* keys) and sent during the last step.
  std::uint64_t mem_params_bytes = 0;
  std::uint64_t mem_grads_bytes = 0;
  std::uint64_t mem_optim_bytes = 0;
  std::uint64_t mem_activations_bytes = 0;
  std::uint64_t mem_gathered_peak_bytes = 0;
  std::uint64_t comm_bytes = 0;
  double loss_scale = 0;                // fp16
  std::uint32_t dump_signal = 0;        // the signal that makes it write its stacks to DTRAIN_STACKS_FILE; 0 = none
  bool exiting = false;                 // its last report: the process finished and is exiting
  bool quiet = false;                   // in a call that keeps its reporter from running
  // The model, for its FLOP/s and MFU: trainable parameters; model FLOPs per token, forward and backward (6N from a
  // script, dtrain-trainer's exact count); the device as torch.cuda.get_device_name names it, or "cpu".
  std::uint64_t model_params = 0;
  double model_flops_per_token = 0;
  std::string device_name;
  // Its place in a tensor- and pipeline-parallel grid (grid_place.h; 0 sizes: not known).
  std::uint32_t tp_rank = 0;
  std::uint32_t tp_size = 0;
  std::uint32_t pp_stage = 0;
  std::uint32_t pp_size = 0;
  // The steps since the previous report, oldest first, at most kMaxStepPoints (step_points.h); none in a heartbeat.
  std::vector<StepPoint> points;
};

inline GridPlace grid_place_of(const HealthValues& v) { return {v.tp_rank, v.tp_size, v.pp_stage, v.pp_size}; }

}  // namespace dtrain
