#pragma once

// The job's Prometheus metrics, taken from the status snapshot (job_status.h) so that /metrics and `dtrain status`
// can never disagree:
//
//   dtrain_worker_step{job,rank,node}                   gauge    the latest step the rank reported
//   dtrain_worker_step_seconds{job,rank,node}           gauge    its latest step's duration
//   dtrain_worker_tokens_per_second{job,rank,node}      gauge
//   dtrain_worker_samples_per_second{job,rank,node}     gauge    batch elements per second (0: not reported)
//   dtrain_worker_data_wait_ratio{job,rank,node}        gauge    data wait / step, over the rank's latest window
//   dtrain_worker_comm_exposed_ratio{job,rank,node}     gauge    exposed communication / step, same window
//   dtrain_worker_pipeline_bubble_ratio{job,rank,node}  gauge    a pipeline stage's bubble / step, same window
//   dtrain_worker_rss_bytes{job,rank,node}              gauge
//   dtrain_worker_device_mem_peak_bytes{job,rank,node}  gauge    the most its tensors held on the accelerator
//   dtrain_worker_model_flops_per_second{job,rank,node} gauge   model FLOPs per token x tokens/s (once known)
//   dtrain_worker_mfu{job,rank,node}                    gauge    model FLOP/s / the GPU's dense bf16/fp16 peak
//   dtrain_job_restarts_total{job}                      counter  restarts so far (the attempt number)
//   dtrain_node_up{job,node}                            gauge    1 while the node's agent is in the job, 0 once lost
//
// A rank has worker samples once it reported: a rank that never reported has no value, which Prometheus shows as
// absent rather than as a 0 that looks like a measurement; the same for the model FLOP/s and MFU of a rank whose
// model, tokens/s or device peak is not known (cli/mfu/model_flops.h), and for the pipeline bubble of a rank that is
// not a pipeline stage. `node` is the node rank, as in `dtrain status`.

#include <vector>

#include <nlohmann/json.hpp>

#include "cli/controller/observe/prometheus_text.h"

namespace dtrain::controller {

// The families of `snapshot`, a JobStatus::snapshot.
std::vector<MetricFamily> job_metrics(const nlohmann::ordered_json& snapshot);

}  // namespace dtrain::controller
