#include "trainer/parallel/grid/rank_grid.h"

#include <stdexcept>

namespace dtrain::trainer {
namespace {

std::string n(int value) { return std::to_string(value); }

std::string joined(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ",") + n(r);
  return text;
}

void check_shape(const GridShape& s) {
  if (s.tp < 1 || s.pp < 1) {
    throw std::invalid_argument("--tp " + n(s.tp) + " --pp " + n(s.pp) + ": both must be 1 or more");
  }
  if (s.world < 1 || s.world % (s.tp * s.pp) != 0) {
    throw std::invalid_argument("--tp " + n(s.tp) + " x --pp " + n(s.pp) + " = " + n(s.tp * s.pp) +
                                " does not divide the world of " + n(s.world) +
                                " ranks: data parallelism is world / (TP x PP); start a multiple of " +
                                n(s.tp * s.pp) + " ranks or change --tp/--pp");
  }
  if (s.ranks_per_node < 1 || s.world % s.ranks_per_node != 0) {
    throw std::invalid_argument(n(s.ranks_per_node) + " ranks per node (LOCAL_WORLD_SIZE) do not divide the world of " +
                                n(s.world) + ": every node must run the same number of ranks");
  }
  const bool spans_nodes = s.tp > s.ranks_per_node || s.ranks_per_node % s.tp != 0;
  if (spans_nodes && !s.allow_cross_node_tp) {
    throw std::invalid_argument("--tp " + n(s.tp) + " with " + n(s.ranks_per_node) +
                                " ranks per node puts a tensor-parallel group across nodes: its two allreduces per "
                                "block half would cross the network every micro-step. Use a --tp that divides " +
                                n(s.ranks_per_node) + ", or pass --allow-cross-node-tp to accept it");
  }
}

}  // namespace

RankGrid::RankGrid(const GridShape& shape) : shape_(shape) {
  check_shape(shape);
  dp_ = shape.world / (shape.tp * shape.pp);
}

GridCoords RankGrid::coords(int rank) const {
  if (rank < 0 || rank >= shape_.world) throw std::out_of_range("rank " + n(rank) + " of " + n(shape_.world));
  return {rank % shape_.tp, (rank / shape_.tp) % dp_, rank / (shape_.tp * dp_)};
}

int RankGrid::rank_of(const GridCoords& c) const { return c.pp * dp_ * shape_.tp + c.dp * shape_.tp + c.tp; }

std::vector<int> RankGrid::tp_group(int rank) const {
  GridCoords c = coords(rank);
  std::vector<int> group;
  for (c.tp = 0; c.tp < shape_.tp; ++c.tp) group.push_back(rank_of(c));
  return group;
}

std::vector<int> RankGrid::dp_group(int rank) const {
  GridCoords c = coords(rank);
  std::vector<int> group;
  for (c.dp = 0; c.dp < dp_; ++c.dp) group.push_back(rank_of(c));
  return group;
}

std::vector<int> RankGrid::pp_group(int rank) const {
  GridCoords c = coords(rank);
  std::vector<int> group;
  for (c.pp = 0; c.pp < shape_.pp; ++c.pp) group.push_back(rank_of(c));
  return group;
}

void check_model_split(int heads, int padded_vocab, int layers, int tp, int pp, int zero) {
  if (heads % tp != 0) {
    throw std::invalid_argument("--tp " + n(tp) + " does not divide the model's " + n(heads) +
                                " attention heads: each tensor-parallel rank holds whole heads; use a --tp that "
                                "divides " + n(heads));
  }
  if (padded_vocab % tp != 0) {
    throw std::invalid_argument("--tp " + n(tp) + " does not divide the padded vocabulary of " + n(padded_vocab) +
                                " rows: the embedding and the output head are split by rows across TP");
  }
  if (layers % pp != 0) {
    throw std::invalid_argument("--pp " + n(pp) + " does not divide the model's " + n(layers) +
                                " layers: each pipeline stage holds the same number; use a --pp that divides " +
                                n(layers));
  }
  if (pp > 1 && zero >= 2) {
    throw std::invalid_argument("--zero " + n(zero) + " with --pp " + n(pp) +
                                ": sharding gradients or parameters across data-parallel ranks while the pipeline's "
                                "micro-batches accumulate them is refused, as Megatron-LM and DeepSpeed refuse it; "
                                "use --zero 1 (the distributed optimizer) or --zero 0");
  }
}

std::string describe_grid(const RankGrid& g) {
  std::string text = "world " + n(g.world()) + " = tp " + n(g.tp()) + " x dp " + n(g.dp()) + " x pp " + n(g.pp()) +
                     " (" + n(g.ranks_per_node()) + " ranks per node; rank = pp*" + n(g.dp() * g.tp()) + " + dp*" +
                     n(g.tp()) + " + tp)\n";
  for (int r = 0; r < g.world(); ++r) {
    const GridCoords c = g.coords(r);
    text += "rank " + n(r) + "  node " + n(r / g.ranks_per_node()) + "  tp " + n(c.tp) + "  dp " + n(c.dp) +
            "  pp " + n(c.pp) + "  | tp group " + joined(g.tp_group(r)) + " | dp group " + joined(g.dp_group(r)) +
            " | pp group " + joined(g.pp_group(r)) + "\n";
  }
  return text;
}

}  // namespace dtrain::trainer
