#include "agent/node/topology/import.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace dtrain::node::topo {
namespace {

// Recent drivers underline the header row with terminal escapes (ESC [ 4 m ... ESC [ 0 m), even into a file.
std::string without_escapes(const std::string& line) {
  std::string out;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      std::size_t j = i + 2;
      while (j < line.size() && ((line[j] >= '0' && line[j] <= '9') || line[j] == ';')) ++j;
      i = j;  // the final letter of the sequence is skipped with it
      continue;
    }
    out += line[i];
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(without_escapes(line));
  }
  return lines;
}

std::vector<std::string> tokens(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string t;
  while (in >> t) out.push_back(t);
  return out;
}

// A line with no tokens: the same whitespace as tokens() (std::isspace: also \v, \f and a lone \r), so a row that
// is not blank always has a first field.
bool blank(const std::string& line) { return tokens(line).empty(); }

[[noreturn]] void fail(std::size_t line, const std::string& what) {
  throw ImportError("line " + std::to_string(line + 1) + ": " + what);
}

}  // namespace

Matrix parse_nvidia_smi_topo(const std::string& text) {
  std::vector<std::string> lines = split_lines(text);
  std::size_t at = 0;
  while (at < lines.size() && blank(lines[at])) ++at;
  if (at == lines.size()) throw ImportError("empty input: expected the output of `nvidia-smi topo -m`");

  // Header: device labels, then the trailing column names (CPU Affinity, NUMA Affinity, GPU NUMA ID).
  const std::string& header = lines[at];
  auto affinity = header.find("CPU Affinity");
  if (affinity == std::string::npos) {
    fail(at, "no \"CPU Affinity\" column: this does not look like `nvidia-smi topo -m` output");
  }
  Matrix m;
  std::string trailing = header.substr(affinity);
  m.has_numa_affinity = trailing.find("NUMA Affinity") != std::string::npos;
  m.has_gpu_numa_id = trailing.find("GPU NUMA ID") != std::string::npos;
  std::vector<std::string> labels = tokens(header.substr(0, affinity));
  if (labels.empty()) fail(at, "the header names no GPU or NIC column");
  std::size_t gpu_count = 0;
  while (gpu_count < labels.size() && labels[gpu_count].rfind("GPU", 0) == 0) ++gpu_count;
  for (std::size_t i = gpu_count; i < labels.size(); ++i) {
    if (labels[i].rfind("GPU", 0) == 0) fail(at, "GPU column " + labels[i] + " after a NIC column");
  }
  if (gpu_count > kMaxImportGpus || labels.size() - gpu_count > kMaxImportNics) {
    const std::size_t nics = labels.size() - gpu_count;
    fail(at, "the header names " + std::to_string(gpu_count) + " GPUs and " + std::to_string(nics) +
                 " NICs; a node has at most " + std::to_string(kMaxImportGpus) + " of each here (real nodes have 8 " +
                 "to 16 GPUs): save the output of `nvidia-smi topo -m` of one node");
  }
  m.gpus.assign(labels.begin(), labels.begin() + static_cast<long>(gpu_count));
  m.nic_labels.assign(labels.begin() + static_cast<long>(gpu_count), labels.end());
  std::size_t n = labels.size();
  std::size_t extra = 1 + (m.has_numa_affinity ? 1 : 0) + (m.has_gpu_numa_id ? 1 : 0);

  // Rows, in header order, up to the first blank line.
  m.cells.assign(n, {});
  std::size_t row = 0;
  for (++at; at < lines.size() && !blank(lines[at]); ++at, ++row) {
    std::vector<std::string> fields = tokens(lines[at]);
    if (row >= n) fail(at, "more rows than the header has columns (" + std::to_string(n) + ")");
    if (fields[0] != labels[row]) fail(at, "expected the row of " + labels[row] + ", found " + fields[0]);
    std::size_t want = n + (row < gpu_count ? extra : 0);
    if (fields.size() - 1 != want) {
      fail(at, "row " + labels[row] + " has " + std::to_string(fields.size() - 1) + " fields, expected " +
                   std::to_string(want) + " (" + std::to_string(n) + " cells" +
                   (row < gpu_count ? " + " + std::to_string(extra) + " affinity columns" : std::string()) + ")");
    }
    m.cells[row].assign(fields.begin() + 1, fields.begin() + 1 + static_cast<long>(n));
    if (m.cells[row][row] != "X") fail(at, labels[row] + " against itself is " + m.cells[row][row] + ", expected X");
    if (row < gpu_count) {
      std::size_t f = 1 + n;
      m.cpu_affinity.push_back(fields[f++]);
      m.numa_affinity.push_back(m.has_numa_affinity ? fields[f++] : "N/A");
      m.gpu_numa_id.push_back(m.has_gpu_numa_id ? fields[f++] : "N/A");
    }
  }
  if (row != n) fail(at, "the matrix ends after " + std::to_string(row) + " rows, the header has " + std::to_string(n));

  // NIC Legend ("  NIC0: mlx5_0"); without one the columns carry the device names themselves.
  std::map<std::string, std::string> legend;
  bool in_legend = false;
  for (; at < lines.size(); ++at) {
    std::vector<std::string> t = tokens(lines[at]);
    if (t.size() == 2 && t[0] == "NIC" && t[1] == "Legend:") {
      in_legend = true;
      continue;
    }
    if (in_legend && t.size() == 2 && t[0].size() > 1 && t[0].back() == ':') {
      legend[t[0].substr(0, t[0].size() - 1)] = t[1];
    }
  }
  m.nic_legend = !legend.empty();
  for (const auto& label : m.nic_labels) {
    auto it = legend.find(label);
    if (m.nic_legend && it == legend.end()) fail(at - 1, "the NIC Legend does not name " + label);
    m.nic_names.push_back(m.nic_legend ? it->second : label);
  }
  return m;
}

}  // namespace dtrain::node::topo
