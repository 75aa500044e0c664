// The TP/DP/PP rank grid (trainer/parallel/grid/rank_grid.h) against Megatron-LM's own example: the docstring of
// megatron/core/parallel_state.py's initialize_model_parallel, 16 GPUs with tensor size 2 and pipeline size 4 (so data
// size 2), lists tensor groups [g0, g1], [g2, g3], ..., data groups [g0, g2], [g1, g3], [g4, g6], ... and pipeline
// groups [g0, g4, g8, g12], [g1, g5, g9, g13], ...; and the refusals, each naming its numbers.
#include <doctest/doctest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/parallel/grid/rank_grid.h"

using namespace dtrain::trainer;

namespace trainer_grid_test {

std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("expected std::invalid_argument");
  return "";
}

TEST_CASE("the grid matches Megatron-LM's example: 16 ranks, TP 2, PP 4") {
  const RankGrid grid({16, 2, 4, 8, false});
  CHECK(grid.dp() == 2);
  CHECK(grid.tp_group(0) == std::vector<int>{0, 1});
  CHECK(grid.tp_group(3) == std::vector<int>{2, 3});
  CHECK(grid.dp_group(0) == std::vector<int>{0, 2});
  CHECK(grid.dp_group(1) == std::vector<int>{1, 3});
  CHECK(grid.dp_group(4) == std::vector<int>{4, 6});
  CHECK(grid.pp_group(0) == std::vector<int>{0, 4, 8, 12});
  CHECK(grid.pp_group(13) == std::vector<int>{1, 5, 9, 13});
  for (int r = 0; r < 16; ++r) CHECK(grid.rank_of(grid.coords(r)) == r);
  const GridCoords c = grid.coords(13);
  CHECK(c.tp == 1);
  CHECK(c.dp == 0);
  CHECK(c.pp == 3);
}

TEST_CASE("the grid's description has a line per rank with its node, coordinates and groups") {
  const std::string text = describe_grid(RankGrid({8, 2, 2, 4, false}));
  CHECK(text.find("world 8 = tp 2 x dp 2 x pp 2 (4 ranks per node") != std::string::npos);
  CHECK(text.find("rank 5  node 1  tp 1  dp 0  pp 1  | tp group 4,5 | dp group 5,7 | pp group 1,5") !=
        std::string::npos);
}

TEST_CASE("layouts that cannot work are refused with their numbers") {
  CHECK(refusal([] { RankGrid({6, 4, 1, 6, false}); }).find("does not divide the world of 6") != std::string::npos);
  CHECK(refusal([] { RankGrid({8, 0, 1, 8, false}); }).find("1 or more") != std::string::npos);
  CHECK(refusal([] { RankGrid({8, 2, 1, 3, false}); }).find("ranks per node") != std::string::npos);
  // TP 4 on nodes of 2 ranks: a TP group across nodes, refused unless allowed.
  CHECK(refusal([] { RankGrid({8, 4, 1, 2, false}); }).find("--allow-cross-node-tp") != std::string::npos);
  CHECK(RankGrid({8, 4, 1, 2, true}).tp_group(5) == std::vector<int>{4, 5, 6, 7});
  CHECK(refusal([] { check_model_split(12, 50304, 12, 5, 1, 0); }).find("12 attention heads") != std::string::npos);
  CHECK(refusal([] { check_model_split(12, 256, 12, 3, 1, 0); }).find("vocabulary of 256") != std::string::npos);
  CHECK(refusal([] { check_model_split(12, 50304, 12, 2, 5, 0); }).find("12 layers") != std::string::npos);
  CHECK(refusal([] { check_model_split(12, 50304, 12, 2, 2, 2); }).find("--zero 1") != std::string::npos);
  check_model_split(12, 50304, 12, 4, 4, 1);  // ZeRO-1 with PP is the distributed optimizer: accepted
}

}  // namespace trainer_grid_test
