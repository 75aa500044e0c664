#include <doctest/doctest.h>

#include "cli/controller/diagnose/diagnosis.h"
#include "cli/controller/observe/job_status.h"
#include "cli/controller/observe/job_monitor.h"
#include "cli/controller/observe/status_view.h"

using namespace dtrain::controller;
using Json = nlohmann::json;

namespace {

WorkerHealth report(unsigned rank, std::uint64_t step, double step_ms) {
  WorkerHealth h;
  h.rank = rank;
  h.step = step;
  h.steps_done = step;
  h.step_ms = step_ms;
  return h;
}

dtrain::spec::Plan two_ranks() {
  dtrain::spec::Plan plan;
  for (unsigned rank = 0; rank < 2; ++rank) {
    dtrain::spec::WorkerPlan w;
    w.rank = rank;
    w.node_rank = 0;
    w.host = "host";
    plan.workers.push_back(w);
  }
  return plan;
}

}  // namespace

TEST_CASE("the snapshot keeps each rank's recent step times, one per new step, at most kRecentSteps") {
  JobStatus status("job");
  status.round_started(0, two_ranks());
  Diagnoser diagnoser(1.5);
  status.reported(report(0, 1, 100), 1);
  status.reported(report(0, 1, 100), 2);   // a heartbeat repeats the step: no new point
  status.reported(report(0, 2, 110), 3);
  Json s = status.snapshot("running", diagnoser, 4);
  CHECK(s["ranks"][0]["recent_step_ms"] == Json::array({100.0, 110.0}));
  CHECK(s["ranks"][1]["recent_step_ms"] == Json::array());
  for (std::uint64_t step = 3; step < 3 + 2 * JobStatus::kRecentSteps; ++step) {
    status.reported(report(0, step, static_cast<double>(step)), 5);
  }
  s = status.snapshot("running", diagnoser, 6);
  const auto recent = s["ranks"][0]["recent_step_ms"];
  REQUIRE(recent.size() == JobStatus::kRecentSteps);
  CHECK(recent.back().get<double>() == 2 + 2 * JobStatus::kRecentSteps);   // the newest last
  // The health events carry the latest report only.
  CHECK_FALSE(status.rank_json(0, diagnoser, 6).contains("recent_step_ms"));
}

TEST_CASE("sparkline: eight levels on one scale, blocks on a terminal, ASCII elsewhere") {
  CHECK(sparkline({100, 150, 200}, 100, 200, false) == "_=#");
  CHECK(sparkline({100, 200}, 100, 200, true) == "\u2581\u2588");
  CHECK(sparkline({5, 5}, 5, 5, false) == "~~");   // a flat series sits in the middle
  CHECK(sparkline({}, 0, 1, true).empty());
}

TEST_CASE("the table draws every rank on the same scale and marks the straggler") {
  Json s = {{"job", "j"}, {"state", "running"}, {"attempt", 0},
            {"ranks", {{{"rank", 0}, {"node", 0}, {"host", "a"}, {"recent_step_ms", {100, 100}}},
                       {{"rank", 1}, {"node", 0}, {"host", "a"}, {"recent_step_ms", {200, 200}}}}},
            {"diagnoses", {{{"kind", "straggler"}, {"ranks", {1}}, {"message", "rank 1 is slow"}, {"fix", "look"}}}}};
  const std::string plain = render_status(s, "", {false});
  CHECK(plain.find("recent steps, 100.0 to 200.0 ms") != std::string::npos);
  CHECK(plain.find("__\n") != std::string::npos);                // rank 0 at the bottom of the scale
  // Rank 1 at the top, named after the sparkline column.
  CHECK(plain.find("##" + std::string(22, ' ') + " straggler\n") != std::string::npos);
  CHECK(plain.find('\033') == std::string::npos);                  // no escape sequences into a pipe
  const std::string shown = render_status(s, "", {true});
  CHECK(shown.find("\033[1;31m\u2588\u2588\033[0m") != std::string::npos);   // the straggler's line in bold red
}

TEST_CASE("the table shows samples/s beside tokens/s, a dash where the rank did not report it") {
  Json s = {{"job", "j"}, {"state", "running"}, {"attempt", 0},
            {"ranks", {{{"rank", 0}, {"node", 0}, {"host", "a"}, {"tokens_per_s", 6400.0}, {"samples_per_s", 12.5}},
                       {{"rank", 1}, {"node", 0}, {"host", "a"}, {"tokens_per_s", 6400.0}}}}};
  const std::string table = render_status(s, "", {false});
  CHECK(table.find("  tokens/s samples/s  mfu%  data%") != std::string::npos);
  CHECK(table.find("      6400      12.5     -      0") != std::string::npos);   // MFU not known: a dash too
  CHECK(table.find("      6400         -     -      0") != std::string::npos);
}

TEST_CASE("a watch frame overwrites the last one in place instead of clearing the screen") {
  CHECK(in_place_frame("a\nb\n", true) == "\033[H\033[2Ja\033[K\nb\033[K\n\033[J");
  CHECK(in_place_frame("a\nb\n", false) == "\033[Ha\033[K\nb\033[K\n\033[J");
}

TEST_CASE("status shows the snapshot's text with control characters escaped, whoever wrote status.json") {
  const Json snapshot = {
      {"job", "job\x1b]0;title\x07"},
      {"state", "running"},
      {"ranks", Json::array({{{"rank", 0}, {"node", 0}, {"host", "h\x1b[2J"}, {"state", "run\x07"}}})},
      {"diagnoses", Json::array({{{"kind", "hang"}, {"message", "stuck in \x1b[31mphase"}, {"fix", "fix\x9b"}}})}};
  for (bool terminal : {false, true}) {
    const std::string text = render_status(snapshot, "note \x1b[H", {terminal});
    CHECK(text.find("job job\\x1b]0;title\\x07: running") != std::string::npos);
    CHECK(text.find("0 (h\\x1b[2J)") != std::string::npos);
    CHECK(text.find("run\\x07") != std::string::npos);
    CHECK(text.find("stuck in \\x1b[31mphase") != std::string::npos);
    CHECK(text.find("fix: fix\\x9b") != std::string::npos);
    CHECK(text.find("note: note \\x1b[H") != std::string::npos);
    CHECK(text.find('\x1b') == std::string::npos);
    CHECK(text.find('\x07') == std::string::npos);
  }
}

TEST_CASE("status shows a snapshot whose text fields have the wrong type instead of failing") {
  const Json snapshot = {{"job", 7}, {"state", "done"}, {"ranks", Json::array({{{"rank", 0}, {"host", 1}}})}};
  CHECK(render_status(snapshot, "", {false}).find("job ?: done") != std::string::npos);
}

TEST_CASE("status.json is rewritten every 5 s, and 5 s more per 4,096 ranks") {
  using dtrain::controller::JobMonitor;
  using std::chrono::seconds;
  CHECK(JobMonitor::file_interval(0) == seconds(5));
  CHECK(JobMonitor::file_interval(8) == seconds(5));
  CHECK(JobMonitor::file_interval(4096) == seconds(5));
  CHECK(JobMonitor::file_interval(4097) == seconds(10));
  CHECK(JobMonitor::file_interval(32768) == seconds(40));
}
