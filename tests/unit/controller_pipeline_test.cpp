// A pipelined job as the launcher judges and shows it: the pipeline_bubble diagnosis past kBubbleShare of a stage's
// step, naming the stage, with its fix (and not below it); the bubble is neither exposed communication nor time no
// phase accounts for; a rank of a grid that splits the model is named with its place in diagnoses and in the failure
// summary; status.json's rows, /metrics and `dtrain status` carry the bubble and the stage.
#include <doctest/doctest.h>

#include <csignal>
#include <string>
#include <vector>

#include "cli/controller/console/console.h"
#include "cli/controller/diagnose/diagnosis.h"
#include "cli/controller/observe/job_metrics.h"
#include "cli/controller/observe/job_status.h"
#include "cli/controller/observe/prometheus_text.h"
#include "cli/controller/observe/status_view.h"

namespace controller_pipeline_test {

using namespace dtrain::controller;
using dtrain::GridPlace;
using dtrain::report::RankSample;

// A 100 ms step of rank `rank`, stage `rank` of 2, whose stage waited `bubble` ms for its neighbour.
RankSample stage_step(unsigned rank, std::uint64_t n, double bubble) {
  RankSample s;
  s.rank = rank;
  s.step = n;
  s.step_ms = 100;
  s.data_wait_ms = 1;
  s.comm_exposed_ms = 5;
  s.optimizer_ms = 4;
  s.compute_ms = 100 - 1 - 5 - 4 - bubble - 2;   // 2 ms no phase accounts for
  s.pipeline_bubble_ms = bubble;
  s.grid = {0, 1, rank, 2};
  return s;
}

// Two stages, one window of kMinWindowSteps steps each, evaluated: stage 0 waits `bubble0`, stage 1 `bubble1`.
Diagnoser two_stages(double bubble0, double bubble1) {
  Diagnoser d(1.2);
  for (unsigned r = 0; r < 2; ++r) d.place(r, RankPlace{0, "host0", 8});
  for (std::uint64_t n = 1; n <= Diagnoser::kMinWindowSteps; ++n) {
    d.add(0, stage_step(0, n, bubble0));
    d.add(1, stage_step(1, n, bubble1));
  }
  d.evaluate();
  return d;
}

std::vector<Diagnosis> of_kind(const Diagnoser& d, DiagnosisKind kind) {
  std::vector<Diagnosis> out;
  for (const auto& x : d.diagnoses()) {
    if (x.kind == kind) out.push_back(x);
  }
  return out;
}

TEST_CASE("a stage's bubble above 25% of its step is a diagnosis naming the stage, with more micro-batches as fix") {
  const Diagnoser d = two_stages(30, 48);
  const auto found = of_kind(d, DiagnosisKind::pipeline_bubble);
  REQUIRE(found.size() == 1);
  CHECK(found[0].ranks == std::vector<unsigned>{1, 0});   // worst first
  CHECK(found[0].message == "pipeline bubble is 48% of the step on stage 1 of 2 (rank 1 on node 0 (host0)): the time "
                            "it waits for its neighbour stages' activations and gradients; above 25% on ranks 1 and 0");
  CHECK(found[0].fix.find("--grad-accum 5 or more with 2 stages") != std::string::npos);
  CHECK(found[0].fix.find("(P-1)/m") != std::string::npos);
  CHECK(found[0].fix.find("--pp-schedule 1f1b rather than gpipe") != std::string::npos);
  CHECK(found[0].fix.find("fewer stages (--pp)") != std::string::npos);
  CHECK(std::string(to_string(DiagnosisKind::pipeline_bubble)) == "pipeline_bubble");
  // The bubble is a part of its own: neither time no phase accounts for (2%) nor exposed communication (5%).
  CHECK(of_kind(d, DiagnosisKind::sync).empty());
  CHECK(of_kind(d, DiagnosisKind::communication).empty());
  CHECK(d.means(1)->pipeline_bubble_ratio == doctest::Approx(0.48));
}

TEST_CASE("a bubble at or below 25% of the step is no diagnosis") {
  const Diagnoser d = two_stages(25, 10);
  CHECK(of_kind(d, DiagnosisKind::pipeline_bubble).empty());
  CHECK(d.diagnoses().empty());
}

TEST_CASE("a rank of a tensor- and pipeline-parallel grid is named with its place in a straggler's and a hang's") {
  Diagnoser d(1.2);
  // T = 2 x P = 2: rank = stage * 2 + tensor-parallel rank. Rank 3's compute is 40 ms more than its peers'.
  for (unsigned r = 0; r < 4; ++r) d.place(r, RankPlace{r / 2, "host" + std::to_string(r / 2), 8});
  std::uint64_t n = 1;
  for (int window = 0; window < Diagnoser::kStragglerWindows; ++window) {
    for (std::size_t i = 0; i < Diagnoser::kMinWindowSteps; ++i, ++n) {
      for (unsigned r = 0; r < 4; ++r) {
        RankSample s = stage_step(r, n, 10);
        s.compute_ms = r == 3 ? 100 : 60;
        s.grid = {r % 2, 2, r / 2, 2};
        d.add(r, s);
      }
    }
    d.evaluate();
  }
  const auto slow = of_kind(d, DiagnosisKind::straggler);
  REQUIRE(slow.size() == 1);
  CHECK(slow[0].message.rfind("rank 3 (pipeline stage 1 of 2, tensor-parallel rank 1 of 2) on node 1 (host1) was ",
                              0) == 0);
  d.hang(2, "made no step progress for 3.0 s");
  const auto hung = of_kind(d, DiagnosisKind::hang);
  REQUIRE(hung.size() == 1);
  CHECK(hung[0].message == "rank 2 (pipeline stage 1 of 2, tensor-parallel rank 0 of 2) on node 1 (host1) made no step "
                           "progress for 3.0 s");
  // A rank that never said where it is in a grid is named as before.
  d.hang(9, "stopped reporting health");
  CHECK(of_kind(d, DiagnosisKind::hang)[1].message == "rank 9 stopped reporting health");
}

TEST_CASE("a pipeline stage that does more work than another (the head's) is compared with its own stage's ranks") {
  Diagnoser d(1.2);
  // P = 2 x DP = 2: ranks 2 and 3 (stage 1, the output head) compute 100 ms, ranks 0 and 1 (stage 0) 60 ms.
  for (unsigned r = 0; r < 4; ++r) d.place(r, RankPlace{r / 2, "host" + std::to_string(r / 2), 8});
  std::uint64_t n = 1;
  for (int window = 0; window < Diagnoser::kStragglerWindows + 1; ++window) {
    for (std::size_t i = 0; i < Diagnoser::kMinWindowSteps; ++i, ++n) {
      for (unsigned r = 0; r < 4; ++r) {
        RankSample s = stage_step(r, n, 10);
        s.compute_ms = r >= 2 ? 100 : 60;
        s.grid = {0, 1, r / 2, 2};
        d.add(r, s);
      }
    }
    d.evaluate();
  }
  CHECK(of_kind(d, DiagnosisKind::straggler).empty());
}

WorkerHealth stage_report(unsigned rank, unsigned pp_size) {
  WorkerHealth h;
  h.rank = rank;
  h.step = 7;
  h.steps_done = 7;
  h.step_ms = 100;
  h.compute_ms = 50;
  h.pipeline_bubble_ms = pp_size > 1 ? 40 : 0;
  h.tp_size = 1;
  h.pp_stage = pp_size > 1 ? rank : 0;
  h.pp_size = pp_size;
  return h;
}

TEST_CASE("a report's bubble and place reach the sample, status.json's row, /metrics and dtrain status") {
  const RankSample s = sample_of(stage_report(1, 2));
  CHECK(s.pipeline_bubble_ms == 40);
  CHECK(s.grid.pp_stage == 1);
  CHECK(s.grid.pp_size == 2);
  dtrain::spec::Plan plan;
  for (unsigned rank = 0; rank < 3; ++rank) {
    dtrain::spec::WorkerPlan w;
    w.rank = rank;
    w.host = "h";
    plan.workers.push_back(w);
  }
  JobStatus status("pp");
  status.round_started(0, plan);
  Diagnoser diagnoser(1.2);
  for (unsigned rank = 0; rank < 3; ++rank) {
    const WorkerHealth h = stage_report(rank, rank < 2 ? 2 : 1);   // rank 2: a job that is not pipelined
    status.reported(h, 1);
    diagnoser.add(rank, sample_of(h));   // the window's means so far: the ratios of status.json's rows
  }
  const auto snapshot = status.snapshot("running", diagnoser, 2);
  const auto& rows = snapshot["ranks"];
  CHECK(rows[1]["pp_stage"] == 1);
  CHECK(rows[1]["pp_size"] == 2);
  CHECK(rows[1]["tp_size"] == 1);
  CHECK(rows[1]["pipeline_bubble_ratio"] == doctest::Approx(0.4));
  CHECK(rows[2]["pipeline_bubble_ratio"].is_null());   // no pipeline: no bubble to measure, not a 0
  const std::string metrics = format_prometheus(job_metrics(snapshot));
  CHECK(metrics.find("# TYPE dtrain_worker_pipeline_bubble_ratio gauge\n") != std::string::npos);
  CHECK(metrics.find("dtrain_worker_pipeline_bubble_ratio{job=\"pp\",rank=\"1\",node=\"0\"} 0.4\n") !=
        std::string::npos);
  CHECK(metrics.find("dtrain_worker_pipeline_bubble_ratio{job=\"pp\",rank=\"2\"") == std::string::npos);
  const std::string table = render_status(nlohmann::json::parse(snapshot.dump()), "", {false});
  CHECK(table.find(" rank stage node ") != std::string::npos);
  CHECK(table.find(" data%  comm% bubble%   memory ") != std::string::npos);
  CHECK(table.find("\n    1   1/2 0 (h) ") != std::string::npos);
  CHECK(table.find("\n    2     - 0 (h) ") == std::string::npos);   // reported pp_size 1: "0/1"
  CHECK(table.find("\n    2   0/1 0 (h) ") != std::string::npos);
  CHECK(table.find("      0      0      40 ") != std::string::npos);   // rank 1: data%, comm%, bubble%
}

TEST_CASE("dtrain status of a job that is not pipelined has no stage or bubble column") {
  const nlohmann::json s = {{"job", "j"}, {"state", "running"}, {"attempt", 0},
                            {"ranks", {{{"rank", 0}, {"node", 0}, {"host", "a"}, {"pp_size", 1}, {"tp_size", 1},
                                        {"pipeline_bubble_ratio", nullptr}}}}};
  const std::string table = render_status(s, "", {false});
  CHECK(table.find("stage") == std::string::npos);
  CHECK(table.find("bubble") == std::string::npos);
  CHECK(table.find(" rank node ") != std::string::npos);
}

TEST_CASE("the failure summary names a stage's rank with its place and its last step's bubble") {
  Failure root;
  root.rank = 1;
  root.node = 0;
  root.host = "h";
  root.exit.signal = SIGKILL;
  WorkerHealth h = stage_report(1, 2);
  h.data_wait_ms = 1;
  h.comm_exposed_ms = 5;
  h.optimizer_ms = 4;
  root.last_health = h;
  Failure other;
  other.rank = 0;
  other.host = "h";
  other.exit.signal = SIGTERM;
  CHECK(rank_name_of(root) == "rank 1 (pipeline stage 1 of 2)");
  CHECK(rank_name_of(other) == "rank 0");   // no report: no place to name
  const std::string text = failure_summary("pp", root, {other}, 0, 0);
  CHECK(text.find("root cause: rank 1 (pipeline stage 1 of 2) on node 0 (h), pid ") != std::string::npos);
  CHECK(text.find("its last step: 100 ms (data wait 1, compute 50, comm exposed 5, optimizer 4, pipeline bubble 40)")
        != std::string::npos);
  CHECK(text.find("also failed: rank 0 on node 0 (h)") != std::string::npos);
}

}  // namespace controller_pipeline_test
