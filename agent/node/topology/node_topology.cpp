#include "agent/node/topology/node_topology.h"

#include "agent/node/topology/import.h"
#include "agent/node/topology/report.h"
#include "common/io/bounded_file.h"

namespace dtrain::node::topo {

NodeTopology summarize(const Report& report, const std::string& source) {
  NodeTopology out;
  out.source = source;
  for (const auto& rank : report.local_ranks) {
    const GpuEntry& gpu = report.gpus[rank.local_rank];
    RankTopology r;
    r.gpu = rank.gpu;
    r.bus_id = gpu.pci.value_or("");
    r.cpu_affinity = gpu.cpu_affinity == "N/A" ? "" : gpu.cpu_affinity;
    r.numa = rank.numa.value_or("");
    // The NIC the analysis chose for this rank first, then the rest of its GPU's nearest.
    if (rank.nic) r.nics.push_back(*rank.nic);
    for (const auto& nic : gpu.nics) {
      if (!rank.nic || nic.name != *rank.nic) r.nics.push_back(nic.name);
    }
    r.env = rank.env;
    out.ranks.push_back(std::move(r));
  }
  for (const auto& warning : report.warnings) {
    if (report.gpu_note.empty() || warning.rfind(report.gpu_note, 0) != 0) out.warnings.push_back(warning);
  }
  return out;
}

Result<Report> import_topology_file(const std::string& path) {
  const Result<std::string> text = read_bounded_file(path, FileBound{kMaxImportBytes});
  if (!text.ok()) {
    return {Status(text.status.code(), text.status.message() + ": save the output of `nvidia-smi topo -m` to a " +
                                           "file and pass its path")};
  }
  try {
    return {{}, analyze_import(text.value)};
  } catch (const ImportError& e) {
    std::string what = e.what();  // "line N: ..." becomes FILE:N: ...
    if (what.rfind("line ", 0) == 0) what.erase(0, 5);
    return {Status(StatusCode::invalid_argument, path + ":" + what)};
  }
}

Result<NodeTopology> load_topology_file(const std::string& path) {
  Result<Report> report = import_topology_file(path);
  if (!report.ok()) return {report.status};
  return {{}, summarize(report.value, path)};
}

}  // namespace dtrain::node::topo
