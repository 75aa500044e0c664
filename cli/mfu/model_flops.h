#pragma once

// A rank's model FLOP/s and MFU from its health report, and the job's from its ranks'.
//
//   model FLOP/s = model_flops_per_token x tokens_per_s        (the rank's own tokens/s, so its own FLOP/s)
//   MFU          = model FLOP/s / the peak of the rank's device: a GPU's dense bf16/fp16 peak (device_peaks.h); a
//                  CPU rank's share of its node's measured fp32 GEMM rate (cpu_rank_peak)
//   job          = the sum of the ranks' model FLOP/s; its MFU that sum over the sum of their peaks, over the ranks
//                  whose MFU is known (Chowdhery et al., "PaLM", arXiv:2204.02311, Appendix B, define MFU so)
//
// Model FLOPs count the model's arithmetic once, whatever the run recomputes, so MFU compares runs and layouts.
// What a rank reports says how they were counted (FlopsBasis): exactly 6 x model_params is the 6N estimate a script's
// instrumentation sends (weights only, no attention); anything else is the worker's own count (dtrain-trainer's
// 6N + 12*L*h*s). Nothing is known (none) before a rank reports its model and its first step's tokens/s, and a device
// with no known peak (an unknown GPU; "cpu" on a node where `dtrain doctor` cached no GEMM rate) has no MFU.
//
// A CPU's peak is measured, not a datasheet's: `dtrain doctor` times the trainer's own fp32 matrix product on all the
// node's CPUs (agent/node/cpu_gemm.h), the rate the trainer's kernels reach at best. fp32, since that is what the CPU
// trainer computes in (its 16-bit paths widen to fp32, trainer/kernels/cpu/gemm_half.h).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain::mfu {

enum class FlopsBasis {
  unknown,      // no model_flops_per_token reported
  estimate_6n,  // 6 x model_params: weights only, from a script
  exact,        // the worker's own count (dtrain-trainer: attention included)
};

// "6N estimate", "exact", or "" for unknown.
const char* to_string(FlopsBasis basis);
// exact unless flops_per_token is 6 x params (to a part in 10^9: the sender computed it in floating point).
FlopsBasis flops_basis(std::uint64_t params, double flops_per_token);

// What the peak an MFU is of: "dense bf16/fp16 peak of h100-sxm".
std::string peak_basis(const char* preset);

// A CPU rank's peak_basis.
inline constexpr const char* kCpuPeakBasis = "measured fp32 GEMM of the node's CPUs";

// A node's measured fp32 GEMM rate (`dtrain doctor`'s cache) and the threads it ran on; 0 = none.
struct CpuGemm {
  double flops_per_s = 0;
  unsigned threads = 0;
};

// The peak of a CPU rank with `rank_threads` threads (its OMP_NUM_THREADS; 0 = not known: the whole node) on `node`:
// its share of the node's rate, rate x rank_threads / the threads measured (at most all of them), so that the ranks
// sharing a node share its rate and the job's MFU is over the node's. None without a rate.
std::optional<double> cpu_rank_peak(const CpuGemm& node, unsigned rank_threads);

// "cpu", ignoring case and surrounding spaces.
bool is_cpu_device(std::string_view device_name);

struct ModelFlops {
  FlopsBasis basis = FlopsBasis::unknown;
  std::optional<double> flops_per_s;   // model FLOP/s; none without flops per token or tokens/s
  std::optional<double> peak_flops;    // the device's peak; none for an unknown device
  std::optional<double> mfu;           // flops_per_s / peak_flops, a fraction (0.42 is 42%)
  std::string peak_basis;              // what peak_flops is; "" without one
};

// One rank's, from its report's values (0 or "" = not known). `cpu_peak` is a CPU rank's (cpu_rank_peak), used when
// the device is "cpu".
ModelFlops rank_model_flops(std::uint64_t params, double flops_per_token, double tokens_per_s,
                            std::string_view device_name, std::optional<double> cpu_peak = std::nullopt);

// The job's, summed over its ranks (add each rank's once).
class JobModelFlops {
 public:
  void add(const ModelFlops& rank);
  std::optional<double> flops_per_s() const;  // none until a rank's is known
  std::optional<double> mfu() const;          // none until a rank's MFU is known
  // The ranks' common basis ("6N estimate", "exact"), "mixed" when they differ, "" when none is known; the same for
  // the peaks' basis.
  std::string flops_basis() const { return flops_basis_; }
  std::string peak_basis() const { return peak_basis_; }

 private:
  double flops_ = 0;
  double flops_with_peak_ = 0;   // of the ranks whose peak is known
  double peaks_ = 0;
  bool any_flops_ = false;
  bool any_peak_ = false;
  std::string flops_basis_;
  std::string peak_basis_;
};

}  // namespace dtrain::mfu
