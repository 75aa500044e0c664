#pragma once

// A rank's place in a tensor- and pipeline-parallel grid, as its health reports say it (report.proto's tp_rank,
// tp_size, pp_stage, pp_size), and the one way the launcher names a rank with it: in its diagnoses, its hang and
// failure messages. A rank of a grid that splits the model ("rank 3 (pipeline stage 1 of 2, tensor-parallel rank 1
// of 2)") is told from its peers by its place: stage 0 of a pipeline waits where stage 1 computes, and a hung stage
// holds up its neighbours. Plain C++: the launcher's domain types and the report page use it.

#include <string>

namespace dtrain {

struct GridPlace {
  unsigned tp_rank = 0;
  unsigned tp_size = 0;    // 0: not known; 1: no tensor parallelism
  unsigned pp_stage = 0;
  unsigned pp_size = 0;    // 0: not known; 1: no pipeline

  bool pipelined() const { return pp_size > 1; }
  bool split() const { return tp_size > 1 || pp_size > 1; }
};

// "pipeline stage 1 of 2, tensor-parallel rank 1 of 2": the parts of `place` that split the model (a size above 1);
// "" when none does.
inline std::string grid_place_text(const GridPlace& place) {
  std::string out;
  if (place.pp_size > 1) {
    out = "pipeline stage " + std::to_string(place.pp_stage) + " of " + std::to_string(place.pp_size);
  }
  if (place.tp_size > 1) {
    if (!out.empty()) out += ", ";
    out += "tensor-parallel rank " + std::to_string(place.tp_rank) + " of " + std::to_string(place.tp_size);
  }
  return out;
}

// "rank 3", or with its place when it has one that splits the model: "rank 3 (pipeline stage 1 of 2)".
inline std::string rank_name(unsigned rank, const GridPlace& place = {}) {
  const std::string where = grid_place_text(place);
  return "rank " + std::to_string(rank) + (where.empty() ? "" : " (" + where + ")");
}

}  // namespace dtrain
