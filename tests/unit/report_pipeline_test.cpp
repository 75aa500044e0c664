// A pipelined job on the report page (cli/report/): the samples events carry the stages' bubble as a column of its
// own (only where some rank had one) and read it back, the windows and merged windows average it, "Where the step
// went" shows it as a part beside data wait, compute, exposed communication and optimizer (only when some rank had
// one), the heat map leaves it out of a rank's own time, and the rows name each rank's stage (status.json's grid
// place) in their tooltips and data-pp-stage.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/report/model/run_model.h"
#include "cli/report/model/samples.h"
#include "cli/report/rank_summaries.h"
#include "cli/report/rows.h"

namespace report_pipeline_test {

namespace fs = std::filesystem;
using namespace dtrain::report;

// A step of a 2-stage pipeline: stage 0 waits 40 of its 100 ms for stage 1's gradients.
RankSample stage_step(unsigned rank, std::uint64_t step, double bubble_ms) {
  RankSample s;
  s.rank = rank;
  s.step = step;
  s.step_ms = 100;
  s.data_wait_ms = 1;
  s.compute_ms = 100 - 1 - 5 - 4 - bubble_ms;
  s.comm_exposed_ms = 5;
  s.optimizer_ms = 4;
  s.pipeline_bubble_ms = bubble_ms;
  s.grid = {0, 1, rank, 2};
  return s;
}

SampleWindow written(SampleRecorder& recorder, std::uint64_t now_ms, std::string* line = nullptr) {
  const auto fields = recorder.take(0, now_ms, true);
  REQUIRE(fields.has_value());
  nlohmann::ordered_json event = {{"ts", now_ms}, {"event", "samples"}};
  for (const auto& [key, value] : fields->items()) event[key] = value;
  if (line != nullptr) *line = event.dump();
  return read_samples(event.dump());
}

TEST_CASE("the samples event has a pipeline_bubble_ms column only where a rank had a bubble, and it reads back") {
  SampleRecorder recorder(0);
  recorder.add(stage_step(0, 1, 40));
  recorder.add(stage_step(0, 2, 30));
  recorder.add(stage_step(1, 2, 0));
  std::string line;
  const SampleWindow window = written(recorder, 1000, &line);
  CHECK(line.find("\"pipeline_bubble_ms\":[35.0,0.0]") != std::string::npos);
  REQUIRE(window.ranks.size() == 2);
  CHECK(window.ranks[0].pipeline_bubble_ms == 35);   // the mean of its window's steps
  CHECK(window.ranks[0].compute_ms == 55);
  CHECK(window.ranks[1].pipeline_bubble_ms == 0);
  recorder.add(stage_step(0, 3, 0));
  written(recorder, 2000, &line);
  CHECK(line.find("pipeline_bubble_ms") == std::string::npos);   // nobody waited: no column
}

TEST_CASE("a window keeps the latest grid place; merged windows average the bubble") {
  RankWindow w;
  w.add(stage_step(1, 1, 20));
  w.add(stage_step(1, 2, 40));
  const RankSample m = w.mean();
  CHECK(m.pipeline_bubble_ms == 30);
  CHECK(m.grid.pp_stage == 1);
  CHECK(m.grid.pp_size == 2);
  std::vector<SampleWindow> windows = {{1000, 1000, 0, {stage_step(0, 1, 20)}, {}},
                                       {2000, 1000, 0, {stage_step(0, 2, 40)}, {}}};
  merge_pairs(windows);
  REQUIRE(windows.size() == 1);
  CHECK(windows[0].ranks[0].pipeline_bubble_ms == 30);
}

RunModel pipeline_run(double bubble_ms) {
  RunModel m;
  m.job_id = "pp-1";
  for (unsigned r = 0; r < 2; ++r) m.node_of[r] = 0;
  SampleWindow window{2000, 1000, 0, {stage_step(0, 3, bubble_ms), stage_step(1, 3, bubble_ms / 2)}, {}};
  m.samples.push_back(window);
  return m;
}

TEST_CASE("where the step went has the pipeline bubble as a part when a rank had one, and only then") {
  RunModel model = pipeline_run(40);
  model.grid_of[0] = {0, 1, 0, 2};
  model.grid_of[1] = {0, 1, 1, 2};
  const std::string chart = step_breakdown(model, chart_rows(model));
  CHECK(chart.find(">pipeline bubble</text>") != std::string::npos);
  CHECK(chart.find(">other</text>") != std::string::npos);
  // Stage 0's row: its 40 ms of bubble is a bar of its own (its scale: 560 px for the longest row's 100 ms).
  CHECK(chart.find("data-rank=\"0\" data-pp-stage=\"0\" data-straggler=\"0\"><title>rank 0 (pipeline stage 0 of 2): "
                   "100 ms</title>") != std::string::npos);
  CHECK(chart.find("width=\"224\" height=\"12\" fill=\"#9467bd\"") != std::string::npos);
  CHECK(chart.find("data-rank=\"1\" data-pp-stage=\"1\"") != std::string::npos);
  const RunModel plain = pipeline_run(0);
  const std::string without = step_breakdown(plain, chart_rows(plain));
  CHECK(without.find("pipeline bubble") == std::string::npos);
  CHECK(without.find("data-pp-stage") == std::string::npos);
  CHECK(without.find("<title>rank 0: 100 ms</title>") != std::string::npos);
}

TEST_CASE("the ranks' grid places come from status.json; a rank of a model that is not split has none") {
  const fs::path dir = fs::temp_directory_path() / ("report-pipeline-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "events.jsonl") << R"({"ts":1000,"event":"job_start","job":"pp-1","name":"pp","command":["a"]})"
                                      << "\n";
  std::ofstream(dir / "status.json")
      << R"({"job":"pp-1","ranks":[{"rank":0,"tp_rank":0,"tp_size":1,"pp_stage":0,"pp_size":2},)"
      << R"({"rank":1,"tp_rank":1,"tp_size":2,"pp_stage":1,"pp_size":2},)"
      << R"({"rank":2,"tp_rank":0,"tp_size":1,"pp_stage":0,"pp_size":1},{"rank":3}],"nodes":[]})";
  const auto run = read_run(dir.string());
  fs::remove_all(dir);
  REQUIRE(run.ok());
  const auto& grid = run.value.grid_of;
  REQUIRE(grid.size() == 2);
  CHECK(grid.at(0).pp_size == 2);
  CHECK(grid.at(1).tp_rank == 1);
  CHECK(grid.at(1).pp_stage == 1);
  CHECK(grid.count(2) == 0);
  CHECK(grid.count(3) == 0);
}

}  // namespace report_pipeline_test
