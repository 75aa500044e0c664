#include "agent/node/cpu_gemm.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "common/io/bounded_file.h"
#include "common/os/state_dir.h"

namespace dtrain::node {
namespace {

constexpr std::size_t kMaxCacheBytes = 64 * 1024;

const char* const kMeasureAgain = ": run `dtrain doctor` on this node to measure it again";

std::string trim(std::string_view text) {
  const auto begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  const auto end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

Status corrupt(const std::string& path, const std::string& what) {
  return {StatusCode::invalid_argument, "the GEMM rate cache " + path + " " + what + kMeasureAgain};
}

}  // namespace

std::string cpu_model_name(const std::string& procfs_root) {
  std::ifstream in(procfs_root + "/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(std::string_view(line).substr(0, colon));
    if (key == "model name" || key == "Processor" || key == "cpu model") {
      std::string value = trim(std::string_view(line).substr(colon + 1));
      if (!value.empty()) return value;
    }
  }
  return "unknown";
}

std::string default_cpu_gemm_path() { return (std::filesystem::path(state_dir()) / "cpu_gemm.json").string(); }

std::string format_cpu_gemm(const CpuGemmRate& rate) {
  const nlohmann::ordered_json out = {{"format", kCpuGemmFormat}, {"cpu_model", rate.cpu_model},
                                      {"threads", rate.threads}, {"flops_per_s", rate.flops_per_s},
                                      {"size", rate.size}, {"measured_unix_ms", rate.measured_unix_ms}};
  // Invalid UTF-8 in a CPU's name becomes U+FFFD instead of an exception.
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<CpuGemmRate> parse_cpu_gemm(std::string_view text, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {corrupt(path, "is not JSON")};
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kCpuGemmFormat) {
    return {corrupt(path, "is not of format " + std::string(kCpuGemmFormat))};
  }
  const auto flops = j.find("flops_per_s");
  const auto threads = j.find("threads");
  const auto model = j.find("cpu_model");
  if (flops == j.end() || !flops->is_number() || !(flops->get<double>() > 0) || flops->get<double>() > 1e18) {
    return {corrupt(path, "has no positive flops_per_s")};
  }
  if (threads == j.end() || !threads->is_number_unsigned() || threads->get<std::uint64_t>() == 0 ||
      threads->get<std::uint64_t>() > 1'000'000) {
    return {corrupt(path, "has no thread count")};
  }
  if (model == j.end() || !model->is_string()) return {corrupt(path, "has no cpu_model")};
  CpuGemmRate rate;
  rate.flops_per_s = flops->get<double>();
  rate.threads = static_cast<unsigned>(threads->get<std::uint64_t>());
  rate.cpu_model = model->get<std::string>();
  if (const auto size = j.find("size"); size != j.end() && size->is_number_integer()) rate.size = size->get<int>();
  if (const auto when = j.find("measured_unix_ms"); when != j.end() && when->is_number_unsigned()) {
    rate.measured_unix_ms = when->get<std::uint64_t>();
  }
  return {{}, rate};
}

Result<CpuGemmRate> read_cpu_gemm(const std::string& path, const std::string& cpu_model, unsigned threads) {
  const Result<std::string> text = read_bounded_file(path, FileBound{kMaxCacheBytes});
  if (text.status.code() == StatusCode::not_found) {
    return {{StatusCode::not_found, "no measured GEMM rate of this node (" + path + " does not exist): run "
                                    "`dtrain doctor` on it to measure one"}};
  }
  if (!text.ok()) return {corrupt(path, "cannot be read (" + text.status.message() + ")")};
  Result<CpuGemmRate> rate = parse_cpu_gemm(text.value, path);
  if (!rate.ok()) return rate;
  if (rate.value.cpu_model != cpu_model || rate.value.threads != threads) {
    return {{StatusCode::failed_precondition,
             "the GEMM rate in " + path + " was measured on " + rate.value.cpu_model + " with " +
                 std::to_string(rate.value.threads) + " threads, this node is " + cpu_model + " with " +
                 std::to_string(threads) + kMeasureAgain}};
  }
  return rate;
}

unsigned affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return static_cast<unsigned>(std::max(1, CPU_COUNT(&set)));
}

Result<CpuGemmRate> read_node_cpu_gemm() {
  return read_cpu_gemm(default_cpu_gemm_path(), cpu_model_name(), affinity_cpu_count());
}

Status write_cpu_gemm(const std::string& path, const CpuGemmRate& rate) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) return {StatusCode::internal, "cannot create " + target.parent_path().string() + ": " + ec.message()};
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << format_cpu_gemm(rate);
    out.flush();
    if (!out) {
      fs::remove(temporary, ec);
      return {StatusCode::internal, "cannot write " + temporary + " (the GEMM rate cache)"};
    }
  }
  fs::rename(temporary, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    return {StatusCode::internal, "cannot rename " + temporary + " to " + path + ": " + ec.message()};
  }
  return {};
}

}  // namespace dtrain::node
