// What a step tells the world (trainer/train/report/step_report.h), for a pipelined run: the metrics line gets
// pp_bubble_ms when the run has more than one stage (even a 0: a stage's bubble can be), never otherwise; the health
// report carries the bubble and the rank's place in the --tp x --pp grid. (In the trainer_trial area: the one that
// links the training loop's library.)
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainer/train/report/step_report.h"

namespace trainer_step_report_test {

using namespace dtrain::trainer;
namespace fs = std::filesystem;

StepMetrics a_step() {
  StepMetrics m;
  m.step = 1;
  m.loss = 5.5;
  m.tokens_per_s = 2000;
  m.step_ms = 30;
  return m;
}

StepTimes pipelined_times(double bubble_ms) {
  StepTimes t;
  t.data_wait_ms = 1;
  t.compute_ms = 15;
  t.comm_exposed_ms = 2;
  t.optimizer_ms = 1;
  t.bubble_ms = bubble_ms;
  return t;
}

// The metrics file `report_step` writes for one step of a run of `pp` stages whose stage waited `bubble_ms`.
std::string metrics_line(int pp, double bubble_ms) {
  const fs::path path = fs::temp_directory_path() / ("dtrain-step-report-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(path);
  {
    MetricsWriter writer(path.string());
    StepReportTargets to;
    to.metrics = &writer;
    to.steps = 10;
    to.log_every = 100;
    to.pp = pp;
    report_step(a_step(), pipelined_times(bubble_ms), to);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove(path);
  return text.str();
}

TEST_CASE("the metrics line has pp_bubble_ms with more than one stage, a 0 included, and not without") {
  CHECK(metrics_line(2, 11.25).find("\"pp_bubble_ms\": 11.25}") != std::string::npos);
  CHECK(metrics_line(4, 0).find("\"pp_bubble_ms\": 0}") != std::string::npos);
  CHECK(metrics_line(1, 0).find("pp_bubble_ms") == std::string::npos);
}

TEST_CASE("the health report carries the stage's bubble and the rank's place in the grid") {
  StepReportTargets to;
  to.rank = 5;
  to.world = 8;
  to.tp = 2;
  to.pp = 2;
  to.tp_rank = 1;
  to.pp_stage = 1;
  const HealthReport r = health_report(a_step(), pipelined_times(11.25), to);
  CHECK(r.pipeline_bubble_ms == 11.25);
  CHECK(r.comm_exposed_ms == 2);   // the bubble is in none of the other times
  CHECK(r.compute_ms == 15);
  CHECK(r.tp_rank == 1);
  CHECK(r.tp_size == 2);
  CHECK(r.pp_stage == 1);
  CHECK(r.pp_size == 2);
  // A rank of a model that is not split says so (sizes 1), rather than "not known" (0).
  const HealthReport plain = health_report(a_step(), StepTimes{}, StepReportTargets{});
  CHECK(plain.pipeline_bubble_ms == 0);
  CHECK(plain.tp_size == 1);
  CHECK(plain.pp_size == 1);
  CHECK(plain.pp_stage == 0);
}

}  // namespace trainer_step_report_test
