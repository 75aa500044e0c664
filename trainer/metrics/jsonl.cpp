#include "trainer/metrics/jsonl.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace dtrain::trainer {
namespace {

void append(std::string& out, const char* key, double value) {
  char number[40];
  if (std::isfinite(value)) {
    std::snprintf(number, sizeof(number), "%.9g", value);
  } else {
    std::snprintf(number, sizeof(number), "null");
  }
  if (out.size() > 1) out += ", ";
  out += '"';
  out += key;
  out += "\": ";
  out += number;
}

void append(std::string& out, const char* key, std::uint64_t value) {
  out += ", \"";
  out += key;
  out += "\": " + std::to_string(value);
}

void append(std::string& out, const ShardingMetrics& s) {
  append(out, "mem_params_bytes", s.mem_params_bytes);
  append(out, "mem_grads_bytes", s.mem_grads_bytes);
  append(out, "mem_optim_bytes", s.mem_optim_bytes);
  append(out, "mem_activations_bytes", s.mem_activations_bytes);
  if (s.mem_gathered_peak_bytes) append(out, "mem_gathered_peak_bytes", *s.mem_gathered_peak_bytes);
}

}  // namespace

std::string to_json(const StepMetrics& m) {
  std::string out = "{";
  out += "\"step\": " + std::to_string(m.step);
  append(out, "loss", m.loss);
  append(out, "lr", m.lr);
  append(out, "grad_norm", m.grad_norm);
  append(out, "tokens_per_s", m.tokens_per_s);
  append(out, "step_ms", m.step_ms);
  if (m.comm_hidden) append(out, "comm_hidden", *m.comm_hidden);
  if (m.comm_ms) append(out, "comm_ms", *m.comm_ms);
  if (m.comm_exposed_ms) append(out, "comm_exposed_ms", *m.comm_exposed_ms);
  if (m.pp_bubble_ms) append(out, "pp_bubble_ms", *m.pp_bubble_ms);
  if (m.sharding) append(out, *m.sharding);
  if (m.comm_bytes) append(out, "comm_bytes", *m.comm_bytes);
  if (m.loss_scale) append(out, "loss_scale", *m.loss_scale);
  if (m.skipped) out += std::string(", \"skipped\": ") + (*m.skipped ? "true" : "false");
  out += "}";
  return out;
}

void drop_metrics_after(const std::string& path, std::uint64_t last_step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    std::size_t key = line.find("\"step\": ");
    if (key != std::string::npos && std::strtoull(line.c_str() + key + 8, nullptr, 10) > last_step) continue;
    kept += line + "\n";
  }
  in.close();
  std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << kept;
    if (!out) throw std::runtime_error("--metrics " + path + ": cannot rewrite it (" + std::strerror(errno) + ")");
  }
  std::filesystem::rename(temp, path);
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    throw std::runtime_error("--metrics " + path + ": cannot open for writing (" + std::strerror(errno) + ")");
  }
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const StepMetrics& metrics) {
  std::string line = to_json(metrics) + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace dtrain::trainer
