#pragma once

// The remedies of `dtrain plan --from` (their rules and sources: measured_run.h), one function per part of a step
// and one for memory. Each returns what applies to the run, with its gain and its lines: Python for a script, flags
// and job-spec keys for dtrain-trainer. The caller decides which parts are worth a remedy and orders them
// (order_remedies).

#include <cstdint>
#include <string>
#include <vector>

#include "cli/plan/measured/measured_run.h"

namespace dtrain::plan {

inline constexpr int kAccumulation = 4;          // the micro-steps the accumulation remedy proposes
inline constexpr double kWorthShare = 0.10;      // a part under 10% of the step (or of memory) gets no remedy
// The largest model Narayanan et al.'s Table 1 (SC21, arXiv:2104.04473) trains with data parallelism alone (GPT
// 1.7B at TP 1 x PP 1; 3.6B already takes TP 2): above it a model is "large" for the TP/PP remedy.
inline constexpr double kLargeModelParams = 1.7e9;

std::vector<Remedy> data_remedies(const MeasuredRun& run);
// Accumulation and buckets; on several nodes, the NIC.
std::vector<Remedy> comm_remedies(const MeasuredRun& run);
// Tensor/pipeline parallelism through `dtrain plan`, when exposed communication on several nodes is the bottleneck
// and the model is large or of unrecorded size; none otherwise.
std::vector<Remedy> layout_remedies(const MeasuredRun& run);
std::vector<Remedy> optimizer_remedies(const MeasuredRun& run);
std::vector<Remedy> compute_remedies(const MeasuredRun& run);
// The ZeRO stages above the job's own that free at least kWorthShare of a rank's memory; none without model states.
std::vector<Remedy> memory_remedies(const MeasuredRun& run);

// Time remedies first, largest gain first (those that claim none last), then memory remedies, most freed first.
void order_remedies(std::vector<Remedy>& remedies);

// The `dtrain plan` command line for a layout with the job's own numbers (layout_remedies' first line).
std::string plan_command(const MeasuredRun& run);

// Bytes as people read them: "1.9 GB", "14.3 MB", "512 kB" (GB = 1e9 bytes, as `dtrain plan` writes them).
std::string bytes_text(std::uint64_t bytes);

}  // namespace dtrain::plan
