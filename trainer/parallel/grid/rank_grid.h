#pragma once

// The ranks of a job laid out for tensor (TP), data (DP) and pipeline (PP) parallelism, in Megatron-LM's default
// order: TP varies fastest, then DP, then PP:
//   rank = pp * (DP * TP) + dp * TP + tp,   DP = world / (TP * PP).
// So a TP group is TP consecutive ranks, which stay on one node when TP divides the ranks per node (TP's
// allreduces are the most frequent and the largest per byte of compute, so they get the fastest links); a PP group
// strides by DP * TP and usually crosses nodes. A TP group that would span nodes is refused with the reason unless
// allowed (allow_cross_node_tp).

#include <string>
#include <vector>

namespace dtrain::trainer {

struct GridShape {
  int world = 1;
  int tp = 1;
  int pp = 1;
  int ranks_per_node = 1;            // LOCAL_WORLD_SIZE: every node runs as many (ranks are numbered node by node)
  bool allow_cross_node_tp = false;  // --allow-cross-node-tp
};

struct GridCoords {
  int tp = 0;
  int dp = 0;
  int pp = 0;
};

class RankGrid {
 public:
  // Throws std::invalid_argument naming the numbers: TP or PP below 1, TP x PP not dividing the world, ranks per
  // node not dividing the world, or a TP group spanning nodes (unless allowed).
  explicit RankGrid(const GridShape& shape);

  int world() const { return shape_.world; }
  int tp() const { return shape_.tp; }
  int pp() const { return shape_.pp; }
  int dp() const { return dp_; }
  int ranks_per_node() const { return shape_.ranks_per_node; }

  GridCoords coords(int rank) const;
  int rank_of(const GridCoords& coords) const;
  // The ranks that share this rank's (dp, pp), (tp, pp) and (tp, dp) respectively, in increasing order.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;

 private:
  GridShape shape_;
  int dp_ = 1;
};

// What splitting the model needs (throws std::invalid_argument with the numbers): the attention heads and the padded
// vocabulary divide by TP (each TP rank holds whole heads and an equal slice of the embedding's rows), the layers by
// PP (equal stages); and ZeRO-2/3 with PP > 1 is refused, as Megatron-LM and DeepSpeed refuse it (gradients and
// parameters sharded across DP while micro-batches of the pipeline accumulate them).
void check_model_split(int heads, int padded_vocab, int layers, int tp, int pp, int zero);

// One line per rank: "rank 5  node 1  tp 1  dp 0  pp 1  | tp group 4,5 | dp group 5,7 | pp group 1,5", after a
// header line with the shape.
std::string describe_grid(const RankGrid& grid);

}  // namespace dtrain::trainer
