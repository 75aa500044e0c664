#include "cli/controller/observe/status_view.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <sstream>

#include "common/io/terminal_text.h"

namespace dtrain::controller {
namespace {

using Json = nlohmann::json;

// Eight levels: the Unicode lower blocks on a terminal, an ASCII ramp of rising ink elsewhere.
constexpr const char* kBlocks[] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
constexpr char kAscii[] = "_.-~=+*#";
constexpr int kLevels = 8;
// The sparkline column shows at most this many recent steps (the snapshot keeps up to JobStatus::kRecentSteps).
constexpr std::size_t kSparkWidth = 24;

// A string field of the snapshot as the terminal may show it: hosts, phases and diagnoses quote what workers and
// agents wrote, and a status.json may have been written by anyone.
std::string text_of(const Json& object, const char* key, const char* fallback = "") {
  const Json value = object.value(key, Json());
  return value.is_string() ? terminal_safe(value.get<std::string>()) : fallback;
}

std::string bytes_text(std::uint64_t bytes) {
  char text[32];
  const double gib = static_cast<double>(bytes) / (1 << 30);
  if (gib >= 1) std::snprintf(text, sizeof text, "%.1fG", gib);
  else std::snprintf(text, sizeof text, "%.0fM", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string number_text(double value, const char* format) {
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::vector<double> recent_of(const Json& rank) {
  std::vector<double> out;
  const Json recent = rank.value("recent_step_ms", Json::array());
  for (const auto& v : recent) {
    if (v.is_number()) out.push_back(v.get<double>());
  }
  if (out.size() > kSparkWidth) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(kSparkWidth));
  return out;
}

std::set<unsigned> stragglers_of(const Json& snapshot) {
  std::set<unsigned> out;
  for (const auto& d : snapshot.value("diagnoses", Json::array())) {
    if (d.value("kind", "") != "straggler") continue;
    for (const auto& r : d.value("ranks", Json::array())) {
      if (r.is_number_integer() && r.get<long long>() >= 0) out.insert(r.get<unsigned>());
    }
  }
  return out;
}

}  // namespace

std::string sparkline(const std::vector<double>& values, double lo, double hi, bool terminal) {
  std::string out;
  for (double v : values) {
    int level = kLevels / 2 - 1;
    if (hi > lo) level = static_cast<int>((std::clamp(v, lo, hi) - lo) / (hi - lo) * (kLevels - 1) + 0.5);
    if (terminal) out += kBlocks[level];
    else out += kAscii[level];
  }
  return out;
}

namespace {

// The columns only some jobs have: a pipeline's stage and bubble, a tensor-parallel rank.
struct GridColumns {
  bool pipelined = false;   // some rank reported pp_size above 1
  bool tensor = false;      // some rank reported tp_size above 1
};

GridColumns grid_columns(const Json& ranks) {
  GridColumns out;
  for (const auto& r : ranks) {
    out.pipelined = out.pipelined || r.value("pp_size", 0u) > 1;
    out.tensor = out.tensor || r.value("tp_size", 0u) > 1;
  }
  return out;
}

// "1/2": a place of its size; "-" while the rank has not reported one.
std::string place_text(const Json& r, const char* index, const char* size) {
  const unsigned of = r.value(size, 0u);
  return of == 0 ? "-" : std::to_string(r.value(index, 0u)) + "/" + std::to_string(of);
}

std::string column(const char* format, const std::string& text) {
  char cell[64];
  std::snprintf(cell, sizeof cell, format, text.c_str());
  return cell;
}

std::string rank_row(const Json& r, double lo, double hi, bool straggler, const StatusView& view,
                     const GridColumns& grid) {
  const std::vector<double> recent = recent_of(r);
  const std::string spark = sparkline(recent, lo, hi, view.terminal);
  const std::string node = std::to_string(r.value("node", 0)) + " (" + text_of(r, "host") + ")";
  const std::uint64_t device = r.value("device_mem_used_bytes", std::uint64_t{0});
  const std::string memory = bytes_text(device > 0 ? device : r.value("rss_bytes", std::uint64_t{0}));
  const Json age = r.value("report_age_s", Json());
  // Few workers count samples (0: not reported): a dash, not a 0 that reads as a measurement.
  const double samples = r.value("samples_per_s", 0.0);
  const Json mfu = r.value("mfu", Json());
  std::string out = column("%5s", std::to_string(r.value("rank", 0u)));
  if (grid.pipelined) out += column(" %5s", place_text(r, "pp_stage", "pp_size"));
  if (grid.tensor) out += column(" %5s", place_text(r, "tp_rank", "tp_size"));
  char line[256];
  std::snprintf(line, sizeof line, " %-18s %8u %-9s %8llu %9s %10s %9s %5s %6s %6s", node.substr(0, 18).c_str(),
                r.value("pid", 0u), text_of(r, "state").c_str(),
                static_cast<unsigned long long>(r.value("step", std::uint64_t{0})),
                number_text(r.value("step_ms", 0.0), "%.1f").c_str(),
                number_text(r.value("tokens_per_s", 0.0), "%.0f").c_str(),
                samples > 0 ? number_text(samples, "%.1f").c_str() : "-",
                mfu.is_number() ? number_text(mfu.get<double>() * 100, "%.1f").c_str() : "-",
                number_text(r.value("data_wait_ratio", 0.0) * 100, "%.0f").c_str(),
                number_text(r.value("comm_exposed_ratio", 0.0) * 100, "%.0f").c_str());
  out += line;
  if (grid.pipelined) {
    const Json bubble = r.value("pipeline_bubble_ratio", Json());
    out += column(" %7s", bubble.is_number() ? number_text(bubble.get<double>() * 100, "%.0f") : "-");
  }
  std::snprintf(line, sizeof line, " %8s %7s  ", memory.c_str(),
                age.is_number() ? number_text(age.get<double>(), "%.1f").c_str() : "-");
  out += line;
  if (straggler && view.terminal) out += "\033[1;31m" + spark + "\033[0m";
  else out += spark;
  if (straggler) out += std::string(kSparkWidth - recent.size(), ' ') + " straggler";
  out.erase(out.find_last_not_of(' ') + 1);
  return out + "\n";
}

// The header line of the rank rows, with the columns `grid` adds.
std::string header_row(const GridColumns& grid, const std::string& recent) {
  std::string out = column("%5s", "rank");
  if (grid.pipelined) out += column(" %5s", "stage");
  if (grid.tensor) out += column(" %5s", "tp");
  char line[256];
  std::snprintf(line, sizeof line, " %-18s %8s %-9s %8s %9s %10s %9s %5s %6s %6s", "node", "pid", "state", "step",
                "step ms", "tokens/s", "samples/s", "mfu%", "data%", "comm%");
  out += line;
  if (grid.pipelined) out += column(" %7s", "bubble%");
  std::snprintf(line, sizeof line, " %8s %7s  ", "memory", "age s");
  return out + line + recent + "\n";
}

// Whether a CPU rank has model FLOP/s but no MFU: its node has no measured GEMM rate (none cached, or a stale one).
bool cpu_rank_without_peak(const Json& s) {
  for (const auto& r : s.value("ranks", Json::array())) {
    if (r.value("device_name", Json()) == "cpu" && r.value("model_flops_per_s", Json()).is_number() &&
        !r.value("mfu", Json()).is_number()) {
      return true;
    }
  }
  return false;
}

// "model: 12.3 TFLOP/s (exact), MFU 41.2% of the dense bf16/fp16 peak of h100-sxm\n", or "" until the job's model
// FLOP/s are known. CPU ranks without a peak add how to get one.
std::string model_flops_line(const Json& s) {
  const Json flops = s.value("model_flops_per_s", Json());
  if (!flops.is_number()) return "";
  std::string out = "model: " + number_text(flops.get<double>() / 1e12, "%.3g") + " TFLOP/s (" +
                    text_of(s, "flops_basis", "?") + ")";
  const Json mfu = s.value("mfu", Json());
  const bool cpu_unknown = cpu_rank_without_peak(s);
  if (mfu.is_number()) {
    out += ", MFU " + number_text(mfu.get<double>() * 100, "%.1f") + "% of the " + text_of(s, "peak_basis", "peak");
    if (cpu_unknown) out += " (some CPU ranks' nodes have no measured GEMM rate: run `dtrain doctor` there)";
  } else if (cpu_unknown) {
    out += ", MFU not known (no measured GEMM rate for the CPU ranks' nodes: run `dtrain doctor` on each, then "
           "launch again)";
  } else {
    out += ", MFU not known (no peak for the ranks' device)";
  }
  return out + "\n";
}

}  // namespace

std::string render_status(const Json& s, const std::string& note, const StatusView& view) {
  std::ostringstream out;
  out << "job " << text_of(s, "job", "?") << ": " << text_of(s, "state", "?") << ", attempt " << s.value("attempt", 0)
      << "\n";
  if (!note.empty()) out << "note: " << terminal_safe(note) << "\n";
  out << model_flops_line(s);
  const Json ranks = s.value("ranks", Json::array());
  double lo = 0, hi = 0;
  bool any = false;
  for (const auto& r : ranks) {
    for (double v : recent_of(r)) {
      lo = any ? std::min(lo, v) : v;
      hi = any ? std::max(hi, v) : v;
      any = true;
    }
  }
  const GridColumns grid = grid_columns(ranks);
  out << header_row(grid, any ? "recent steps, " + number_text(lo, "%.1f") + " to " + number_text(hi, "%.1f") + " ms"
                              : "recent steps");
  const std::set<unsigned> stragglers = stragglers_of(s);
  for (const auto& r : ranks) {
    out << rank_row(r, lo, hi, stragglers.count(r.value("rank", 0u)) > 0, view, grid);
  }
  const Json diagnoses = s.value("diagnoses", Json::array());
  if (diagnoses.empty()) out << "diagnoses: none\n";
  for (const auto& d : diagnoses) {
    out << "diagnosis (" << text_of(d, "kind") << "): " << text_of(d, "message") << "\n  fix: " << text_of(d, "fix")
        << "\n";
  }
  return out.str();
}

std::string in_place_frame(const std::string& text, bool first) {
  // Clearing the whole screen is done once; later frames overwrite line by line.
  std::string out = first ? "\033[H\033[2J" : "\033[H";
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    out.append(text, begin, end - begin);
    out += "\033[K\n";
    begin = end + 1;
  }
  return out + "\033[J";
}

}  // namespace dtrain::controller
