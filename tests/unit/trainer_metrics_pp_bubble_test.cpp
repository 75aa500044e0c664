// The --metrics line of a pipelined run (trainer/metrics/jsonl.h): "pp_bubble_ms" beside the other times when the
// run has one, a 0 included (a stage that never waited), and no key at all otherwise.
#include <doctest/doctest.h>

#include <string>

#include "trainer/metrics/jsonl.h"

namespace trainer_metrics_pp_bubble_test {

using dtrain::trainer::StepMetrics;
using dtrain::trainer::to_json;

StepMetrics two_rank_step() {
  StepMetrics m;
  m.step = 4;
  m.loss = 5.25;
  m.lr = 6e-4;
  m.grad_norm = 1.5;
  m.tokens_per_s = 1000;
  m.step_ms = 40;
  m.comm_hidden = 0.5;
  m.comm_ms = 4;
  m.comm_exposed_ms = 2;
  return m;
}

TEST_CASE("a pipelined step's line has pp_bubble_ms after the communication times") {
  StepMetrics m = two_rank_step();
  m.pp_bubble_ms = 17.5;
  CHECK(to_json(m) == "{\"step\": 4, \"loss\": 5.25, \"lr\": 0.0006, \"grad_norm\": 1.5, \"tokens_per_s\": 1000, "
                      "\"step_ms\": 40, \"comm_hidden\": 0.5, \"comm_ms\": 4, \"comm_exposed_ms\": 2, "
                      "\"pp_bubble_ms\": 17.5}");
  m.pp_bubble_ms = 0;
  CHECK(to_json(m).find("\"pp_bubble_ms\": 0}") != std::string::npos);
}

TEST_CASE("a step that is not pipelined has no pp_bubble_ms") {
  CHECK(to_json(two_rank_step()).find("pp_bubble_ms") == std::string::npos);
  CHECK(to_json(StepMetrics{}).find("pp_bubble_ms") == std::string::npos);
}

}  // namespace trainer_metrics_pp_bubble_test
