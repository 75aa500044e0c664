#pragma once

// What the agent accepts of a worker's health report, whichever way it came (WorkerReports.Report over gRPC,
// service/report_service.h, or a datagram on the health socket, service/health_socket.h): values that can be real,
// and a phase the launcher can print as it is. Plain rules over the worker's message; no gRPC.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/report/step_points.h"
#include "common/status.h"
#include "dtrain/v1/report.pb.h"

namespace dtrain::agent {

// The largest step a report may carry: 2^53, past which a step count stops being exact in the JSON and doubles
// that views of a run use, and far past any real run (a billion steps is decades). Anything larger is a wrapped
// negative number or garbage (2^64-1 from a -1).
inline constexpr std::uint64_t kMaxReportedStep = std::uint64_t{1} << 53;
// The largest byte count a report may carry (resident set, device memory, the mem_* sizes, a step's comm_bytes):
// 1 PiB, past any one machine's memory or any one step's traffic.
inline constexpr std::uint64_t kMaxReportedBytes = std::uint64_t{1} << 50;
// The longest time a report may carry (step_ms and its parts): a week. A step that took longer is not a step of a
// run anyone is watching; a larger number is garbage.
inline constexpr double kMaxReportedMs = 7.0 * 24 * 3600 * 1000;
// The largest loss scale: the largest float, the type fp16 training keeps its scale in.
inline constexpr double kMaxReportedLossScale = 3.4028234663852886e38;
// The largest dump_signal: SIGRTMAX on Linux.
inline constexpr std::uint32_t kMaxReportedSignal = 64;
// The longest phase the launcher is given; a longer one is cut (phase_of).
inline constexpr std::size_t kMaxPhaseBytes = 128;
// The most parameters a report may name: 2^50, about 10^15, hundreds of times the largest model trained; a larger
// count is a wrapped negative number or garbage.
inline constexpr std::uint64_t kMaxReportedParams = std::uint64_t{1} << 50;
// The most model FLOPs per token: 10^18, past 6 x 2^50 (the 6N of the most parameters above) plus any attention
// term (12 x layers x width x sequence: 10^14 at 200 layers, a width of 50,000 and a million-token sequence).
inline constexpr double kMaxReportedFlopsPerToken = 1e18;
// The largest tensor- or pipeline-parallel size a report may carry (tp_size, pp_size): 65,536, the most ranks a job
// spec allows (cli/spec's kMaxWorldSize); a larger size is garbage.
inline constexpr std::uint32_t kMaxReportedGridSize = 65536;
// The longest device name the launcher is given; a longer one is cut (device_name_of). torch's names are under 40.
inline constexpr std::size_t kMaxDeviceNameBytes = 128;

// Whether a report's values can be real, or invalid_argument naming the first that cannot: loss must be finite;
// tokens/s, samples/s, loss_scale and the times (step_ms, data_wait_ms, compute_ms, comm_exposed_ms, optimizer_ms,
// pipeline_bubble_ms) finite and not negative; step, the byte counts, the times, loss_scale, dump_signal, model_params
// and model_flops_per_token (finite, not negative) within the bounds above; tp_size and pp_size at most
// kMaxReportedGridSize, tp_rank below tp_size and pp_stage below pp_size (both 0 when their size is 0); points
// (step_points.h) at most kMaxStepPoints, their steps increasing and at most kMaxReportedStep, each loss finite, each
// step_ms and tokens_per_s finite and not negative (step_ms at most kMaxReportedMs). A loss may be negative (not every
// objective is a cross-entropy). A run whose loss stopped being finite has diverged; it says so in its error, not in a
// health report. The phase and the device name are never refused: phase_of and device_name_of cut them.
Status check_report_values(const v1::WorkerReport& report);

// The phase as the launcher gets it: at most kMaxPhaseBytes, cut before the first byte that does not continue valid
// UTF-8 (a worker's bytes are not trusted to be text), so the launcher can print it as it is.
std::string phase_of(std::string_view phase);
// The device name as the launcher gets it: the same rule as phase_of, at most kMaxDeviceNameBytes.
std::string device_name_of(std::string_view device_name);

}  // namespace dtrain::agent
