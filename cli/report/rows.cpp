#include "cli/report/rows.h"

#include <algorithm>
#include <set>

#include "cli/report/svg.h"
#include "common/report/grid_place.h"

namespace dtrain::report {

std::string ChartRows::attributes(std::size_t row) const {
  const ChartRow& r = rows[row];
  std::string out = r.rank >= 0 ? " data-rank=\"" + std::to_string(r.rank) + "\""
                                : " data-node=\"" + std::to_string(r.node) + "\"";
  if (r.pp_stage >= 0) out += " data-pp-stage=\"" + std::to_string(r.pp_stage) + "\"";
  return out + " data-straggler=\"" + (r.straggler ? "1" : "0") + "\"";
}

std::string ChartRows::note() const {
  if (!by_node) return "";
  return "This job has more than " + std::to_string(kMaxRankRows) +
         " ranks: the per-rank charts show one row per node (its slowest rank in the heat map, the mean of its ranks "
         "in the step bars, the peak of its ranks for memory).";
}

ChartRows chart_rows(const RunModel& model, std::size_t max_rank_rows) {
  // Ranks that reported without a worker_started line (a log cut short) still get a row.
  std::map<unsigned, unsigned> node_of = model.node_of;
  for (const auto& w : model.samples) {
    for (const auto& s : w.ranks) node_of.try_emplace(s.rank, 0);
  }
  const auto stragglers = model.stragglers();
  const std::set<unsigned> slow(stragglers.begin(), stragglers.end());
  ChartRows out;
  out.by_node = node_of.size() > max_rank_rows;
  if (!out.by_node) {
    for (const auto& [rank, node] : node_of) {
      out.row_of[rank] = out.rows.size();
      const auto place = model.grid_of.find(rank);
      const GridPlace grid = place == model.grid_of.end() ? GridPlace{} : place->second;
      out.rows.push_back({"rank " + std::to_string(rank), rank_name(rank, grid), static_cast<int>(rank), -1, {rank},
                          slow.count(rank) > 0, grid.pipelined() ? static_cast<int>(grid.pp_stage) : -1});
    }
    return out;
  }
  std::map<unsigned, std::size_t> row_of_node;
  for (const auto& [rank, node] : node_of) {
    auto [it, fresh] = row_of_node.try_emplace(node, out.rows.size());
    if (fresh) {
      const auto host = model.hosts.find(node);
      std::string label = "node " + std::to_string(node);
      if (host != model.hosts.end() && !host->second.empty()) label += " (" + host->second + ")";
      out.rows.push_back({label, label, -1, static_cast<int>(node), {}, false});
    }
    ChartRow& row = out.rows[it->second];
    row.ranks.push_back(rank);
    row.straggler = row.straggler || slow.count(rank) > 0;
    out.row_of[rank] = it->second;
  }
  return out;
}

}  // namespace dtrain::report
