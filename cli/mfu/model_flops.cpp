#include "cli/mfu/model_flops.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "cli/mfu/device_peaks.h"

namespace dtrain::mfu {
namespace {

// Two ranks' bases as the job's: the one they share, else "mixed".
void merge_basis(std::string& job, const std::string& rank) {
  if (rank.empty() || job == rank) return;
  job = job.empty() ? rank : "mixed";
}

}  // namespace

const char* to_string(FlopsBasis basis) {
  switch (basis) {
    case FlopsBasis::unknown: return "";
    case FlopsBasis::estimate_6n: return "6N estimate";
    case FlopsBasis::exact: return "exact";
  }
  return "";
}

FlopsBasis flops_basis(std::uint64_t params, double flops_per_token) {
  if (!(flops_per_token > 0)) return FlopsBasis::unknown;
  const double six_n = 6.0 * static_cast<double>(params);
  return std::fabs(flops_per_token - six_n) <= 1e-9 * six_n ? FlopsBasis::estimate_6n : FlopsBasis::exact;
}

std::string peak_basis(const char* preset) { return std::string("dense bf16/fp16 peak of ") + preset; }

std::optional<double> cpu_rank_peak(const CpuGemm& node, unsigned rank_threads) {
  if (!(node.flops_per_s > 0) || node.threads == 0) return std::nullopt;
  const unsigned threads = rank_threads == 0 ? node.threads : std::min(rank_threads, node.threads);
  return node.flops_per_s * threads / node.threads;
}

bool is_cpu_device(std::string_view device_name) {
  const auto begin = device_name.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return false;
  const std::string_view name = device_name.substr(begin, device_name.find_last_not_of(" \t") - begin + 1);
  return name.size() == 3 && std::tolower(static_cast<unsigned char>(name[0])) == 'c' &&
         std::tolower(static_cast<unsigned char>(name[1])) == 'p' &&
         std::tolower(static_cast<unsigned char>(name[2])) == 'u';
}

ModelFlops rank_model_flops(std::uint64_t params, double flops_per_token, double tokens_per_s,
                            std::string_view device_name, std::optional<double> cpu_peak) {
  ModelFlops out;
  out.basis = flops_basis(params, flops_per_token);
  if (out.basis != FlopsBasis::unknown && tokens_per_s > 0) out.flops_per_s = flops_per_token * tokens_per_s;
  if (is_cpu_device(device_name)) {
    if (cpu_peak && *cpu_peak > 0) {
      out.peak_flops = *cpu_peak;
      out.peak_basis = kCpuPeakBasis;
    }
  } else if (const auto peaks = peaks_of_device(device_name)) {
    out.peak_flops = peaks->dense_half_flops;
    out.peak_basis = peak_basis(peaks->preset);
  }
  if (out.flops_per_s && out.peak_flops && *out.peak_flops > 0) out.mfu = *out.flops_per_s / *out.peak_flops;
  return out;
}

void JobModelFlops::add(const ModelFlops& rank) {
  if (!rank.flops_per_s) return;
  flops_ += *rank.flops_per_s;
  any_flops_ = true;
  merge_basis(flops_basis_, to_string(rank.basis));
  if (!rank.mfu) return;
  flops_with_peak_ += *rank.flops_per_s;
  peaks_ += *rank.peak_flops;
  any_peak_ = true;
  merge_basis(peak_basis_, rank.peak_basis);
}

std::optional<double> JobModelFlops::flops_per_s() const {
  return any_flops_ ? std::optional<double>(flops_) : std::nullopt;
}

std::optional<double> JobModelFlops::mfu() const {
  return any_peak_ ? std::optional<double>(flops_with_peak_ / peaks_) : std::nullopt;
}

}  // namespace dtrain::mfu
