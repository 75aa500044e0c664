#include "agent/health/report_values.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace dtrain::agent {
namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// One bounded field of a report, for the checks that treat a list of fields alike.
template <class T>
struct NamedValue {
  const char* name;
  T value;
  T most;
  const char* most_in_words;   // the bound in words, said after it in the error; nullptr when there is no bound
};

// The length of the longest prefix of `bytes` that is valid UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing past U+10FFFF).
std::size_t valid_utf8_prefix(std::string_view bytes) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[at]);
    std::size_t length = 1;
    unsigned char low = 0x80, high = 0xBF;   // the range of the second byte
    if (lead < 0x80) {
      ++at;
      continue;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return at;
    }
    if (at + length > bytes.size()) return at;
    for (std::size_t i = 1; i < length; ++i) {
      const auto next = static_cast<unsigned char>(bytes[at + i]);
      if (next < (i == 1 ? low : 0x80) || next > (i == 1 ? high : 0xBF)) return at;
    }
    at += length;
  }
  return at;
}

// At most `most` bytes of a worker's text, cut before its first byte that is not valid UTF-8.
std::string text_of(std::string_view text, std::size_t most) {
  text = text.substr(0, std::min(text.size(), most));
  return std::string(text.substr(0, valid_utf8_prefix(text)));
}

// The points' rules (report_values.h), or invalid_argument naming the point and what is wrong with it.
Status check_points(const v1::WorkerReport& report) {
  if (static_cast<std::size_t>(report.points_size()) > kMaxStepPoints) {
    return {StatusCode::invalid_argument,
            "points holds " + std::to_string(report.points_size()) + " steps; a report carries at most " +
                std::to_string(kMaxStepPoints) + " (keep the first, the last and the lowest and highest losses "
                "between: common/report/step_points.h)"};
  }
  for (int i = 0; i < report.points_size(); ++i) {
    const v1::StepPoint& p = report.points(i);
    const std::string which = "points[" + std::to_string(i) + "] (step " + std::to_string(p.step()) + ")";
    if (p.step() > kMaxReportedStep) {
      return {StatusCode::invalid_argument, which + ": the step is over 2^53; not a step count"};
    }
    if (i > 0 && p.step() <= report.points(i - 1).step()) {
      return {StatusCode::invalid_argument, which + ": the steps must increase, oldest first (the one before is " +
                                                std::to_string(report.points(i - 1).step()) + ")"};
    }
    if (!std::isfinite(p.loss())) {
      return {StatusCode::invalid_argument, which + ": the loss is " + number(p.loss()) + "; it must be finite"};
    }
    if (!std::isfinite(p.step_ms()) || p.step_ms() < 0 || p.step_ms() > kMaxReportedMs) {
      return {StatusCode::invalid_argument, which + ": step_ms is " + number(p.step_ms()) +
                                                "; it must be a finite number, 0 to " + number(kMaxReportedMs) +
                                                " (a week)"};
    }
    if (!std::isfinite(p.tokens_per_s()) || p.tokens_per_s() < 0) {
      return {StatusCode::invalid_argument, which + ": tokens_per_s is " + number(p.tokens_per_s()) +
                                                "; it must be a finite number, 0 or more"};
    }
  }
  return {};
}

// The grid place's rules (report_values.h), or invalid_argument naming the field.
Status check_grid(const v1::WorkerReport& report) {
  struct Place {
    const char* index_name;
    std::uint32_t index;
    const char* size_name;
    std::uint32_t size;
  };
  const Place places[] = {{"tp_rank", report.tp_rank(), "tp_size", report.tp_size()},
                          {"pp_stage", report.pp_stage(), "pp_size", report.pp_size()}};
  for (const Place& p : places) {
    if (p.size > kMaxReportedGridSize) {
      return {StatusCode::invalid_argument, std::string(p.size_name) + " " + std::to_string(p.size) + " is over " +
                                                std::to_string(kMaxReportedGridSize) +
                                                " (the most ranks a job has); not a value this field can have"};
    }
    if (p.index >= std::max<std::uint32_t>(p.size, 1)) {
      return {StatusCode::invalid_argument,
              std::string(p.index_name) + " " + std::to_string(p.index) + " is not below " + p.size_name + " " +
                  std::to_string(p.size) + (p.size == 0 ? " (not known: send the size with the place)" : "")};
    }
  }
  return {};
}

}  // namespace

Status check_report_values(const v1::WorkerReport& report) {
  if (report.step() > kMaxReportedStep) {
    return {StatusCode::invalid_argument,
            "step " + std::to_string(report.step()) + " is not a step count (the most a report may carry is 2^53 = " +
                std::to_string(kMaxReportedStep) + "; a negative number sent as unsigned looks like this)"};
  }
  if (!std::isfinite(report.loss())) {
    return {StatusCode::invalid_argument,
            "loss is " + number(report.loss()) + "; reports carry finite losses (a run whose loss is no longer "
            "finite has diverged: let it fail with an error that says so)"};
  }
  const NamedValue<double> amounts[] = {
      {"tokens_per_s", report.tokens_per_s(), std::numeric_limits<double>::max(), nullptr},
      {"samples_per_s", report.samples_per_s(), std::numeric_limits<double>::max(), nullptr},
      {"step_ms", report.step_ms(), kMaxReportedMs, "a week"},
      {"data_wait_ms", report.data_wait_ms(), kMaxReportedMs, "a week"},
      {"compute_ms", report.compute_ms(), kMaxReportedMs, "a week"},
      {"comm_exposed_ms", report.comm_exposed_ms(), kMaxReportedMs, "a week"},
      {"optimizer_ms", report.optimizer_ms(), kMaxReportedMs, "a week"},
      {"pipeline_bubble_ms", report.pipeline_bubble_ms(), kMaxReportedMs, "a week"},
      {"loss_scale", report.loss_scale(), kMaxReportedLossScale, "the largest float"},
      {"model_flops_per_token", report.model_flops_per_token(), kMaxReportedFlopsPerToken,
       "past 6 FLOPs for each of 2^50 parameters"},
  };
  for (const auto& amount : amounts) {
    if (!std::isfinite(amount.value) || amount.value < 0 || amount.value > amount.most) {
      const std::string bound = amount.most_in_words == nullptr
                                    ? ""
                                    : ", at most " + number(amount.most) + " (" + amount.most_in_words + ")";
      return {StatusCode::invalid_argument, std::string(amount.name) + " is " + number(amount.value) +
                                                "; it must be a finite number, 0 or more" + bound};
    }
  }
  const NamedValue<std::uint64_t> sizes[] = {
      {"rss_bytes", report.rss_bytes(), kMaxReportedBytes, "1 PiB"},
      {"device_mem_used_bytes", report.device_mem_used_bytes(), kMaxReportedBytes, "1 PiB"},
      {"device_mem_total_bytes", report.device_mem_total_bytes(), kMaxReportedBytes, "1 PiB"},
      {"device_mem_peak_bytes", report.device_mem_peak_bytes(), kMaxReportedBytes, "1 PiB"},
      {"mem_params_bytes", report.mem_params_bytes(), kMaxReportedBytes, "1 PiB"},
      {"mem_grads_bytes", report.mem_grads_bytes(), kMaxReportedBytes, "1 PiB"},
      {"mem_optim_bytes", report.mem_optim_bytes(), kMaxReportedBytes, "1 PiB"},
      {"mem_activations_bytes", report.mem_activations_bytes(), kMaxReportedBytes, "1 PiB"},
      {"mem_gathered_peak_bytes", report.mem_gathered_peak_bytes(), kMaxReportedBytes, "1 PiB"},
      {"comm_bytes", report.comm_bytes(), kMaxReportedBytes, "1 PiB"},
      {"dump_signal", report.dump_signal(), kMaxReportedSignal, "SIGRTMAX; 0 for none"},
      {"model_params", report.model_params(), kMaxReportedParams, "2^50, hundreds of times the largest model"},
  };
  for (const auto& size : sizes) {
    if (size.value > size.most) {
      return {StatusCode::invalid_argument, std::string(size.name) + " " + std::to_string(size.value) +
                                                " is over " + std::to_string(size.most) + " (" +
                                                size.most_in_words + "); not a value this field can have"};
    }
  }
  if (Status grid = check_grid(report); !grid.ok()) return grid;
  return check_points(report);
}

std::string phase_of(std::string_view phase) { return text_of(phase, kMaxPhaseBytes); }

std::string device_name_of(std::string_view device_name) { return text_of(device_name, kMaxDeviceNameBytes); }

}  // namespace dtrain::agent
