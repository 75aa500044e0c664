#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli/report/page.h"
#include "cli/report/report.h"
#include "cli/report/model/run_model.h"

using namespace dtrain::report;

namespace {

namespace fs = std::filesystem;

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A run of `ranks` ranks, 8 per node, 30 one-second windows; rank `slow` has 3x the data wait and is diagnosed.
RunModel run_of(unsigned ranks, unsigned slow) {
  RunModel m;
  m.job_id = "demo-1";
  m.command = {"python3", "train.py", "<x>"};
  m.start_ms = 1'000'000;
  m.end_ms = 1'031'000;
  m.outcome = "succeeded";
  m.rounds.push_back({0, 1'000'100, 1'030'900, ranks / 8 + 1, "succeeded", ""});
  for (unsigned r = 0; r < ranks; ++r) m.node_of[r] = r / 8;
  for (unsigned w = 0; w < 30; ++w) {
    SampleWindow window{1'001'000 + w * 1000ull, 1000, 0, {}, {}};
    for (unsigned r = 0; r < ranks; ++r) {
      const double data = r == slow ? 60 : 5;
      window.ranks.push_back({r, w * 10ull, 100, 2.0 - w * 0.01, 500, data, 40, r == slow ? 0.0 : 55.0, 5,
                              std::uint64_t{200} << 20, 0});
    }
    m.samples.push_back(window);
  }
  m.diagnoses.push_back({"straggler", {slow}, "rank " + std::to_string(slow) + " was slow", "feed it faster"});
  return m;
}

}  // namespace

TEST_CASE("the page has one heat-map row per rank, the straggler outlined, and the diagnosis with its fix") {
  const std::string page = render_page(run_of(32, 5));
  CHECK(count_of(page, "class=\"hm-row\"") == 32);
  CHECK(count_of(page, "data-straggler=\"1\"") == 3);   // its heat-map, step-breakdown and memory rows
  CHECK(page.find("class=\"hm-row\" data-rank=\"5\" data-straggler=\"1\"") != std::string::npos);
  CHECK(count_of(page, "rect class=\"straggler\"") == 1);
  CHECK(page.find("rank 5 was slow") != std::string::npos);
  CHECK(page.find("fix: feed it faster") != std::string::npos);
  CHECK(page.find("python3 train.py &lt;x&gt;") != std::string::npos);   // escaped
  CHECK(page.find("id=\"aggregated\"") == std::string::npos);
  CHECK(page.find("data-chart=\"loss\"") != std::string::npos);
  CHECK(page.find("data-chart=\"step-breakdown\"") != std::string::npos);
  CHECK(page.find("data-chart=\"memory-device\"") == std::string::npos);   // no device memory reported
}

TEST_CASE("the page shows control characters from the command, a root cause and a diagnosis as \\xNN, never raw") {
  RunModel m = run_of(2, 1);
  m.command = {"python3", "-c", "print('\x1b]0;title\x07')", "\xff"};
  m.rounds.back().root_cause = "rank 1 said \x1b[2J";
  m.diagnoses.back().message = "slow\x08\x7f";
  const std::string page = render_page(m);
  CHECK(page.find("print(&#39;\\x1b]0;title\\x07&#39;) \\xff") != std::string::npos);
  CHECK(page.find("rank 1 said \\x1b[2J") != std::string::npos);
  CHECK(page.find("slow\\x08\\x7f") != std::string::npos);
  for (char c = 0; c < 0x20; ++c) {
    if (c != '\n') CHECK_MESSAGE(page.find(c) == std::string::npos, "control character ", int(c), " in the page");
  }
  CHECK(page.find('\x7f') == std::string::npos);
  CHECK(page.find('\xff') == std::string::npos);
}

TEST_CASE("the page loads nothing: no script, no external reference, and a policy that forbids fetching") {
  const std::string page = render_page(run_of(4, 1));
  CHECK(page.find("<script") == std::string::npos);
  CHECK_FALSE(std::regex_search(page, std::regex(R"((src|href)=\"(https?:)?//)")));
  CHECK(page.find("default-src 'none'") != std::string::npos);
}

TEST_CASE("more than 64 ranks: one row per node, its straggler node outlined, and the page says so") {
  const std::string page = render_page(run_of(1024, 700));
  CHECK(count_of(page, "class=\"hm-row\"") == 128);
  CHECK(page.find("class=\"hm-row\" data-node=\"87\" data-straggler=\"1\"") != std::string::npos);
  CHECK(page.find("id=\"aggregated\"") != std::string::npos);
  CHECK(page.size() < 5'000'000);
}

TEST_CASE("a run directory reads back: rounds, failures, restarts and the samples; health lines skipped") {
  const fs::path dir = fs::temp_directory_path() / ("report-test-" + std::to_string(::getpid()));
  fs::create_directories(dir / "attempt_0" / "stacks");
  std::ofstream(dir / "attempt_0" / "stacks" / "rank_1.txt") << "stacks\n";
  std::ofstream(dir / "events.jsonl")
      << R"({"ts":1000,"event":"job_start","job":"j-1","name":"j","command":["a","b"]})" "\n"
      << R"({"ts":1001,"event":"round_start","round":0,"nodes":2})" "\n"
      << R"({"ts":1002,"event":"worker_started","round":0,"rank":3,"node":1,"pid":9})" "\n"
      << R"({"ts":1500,"event":"health","round":0,"ranks":[{"rank":99}]})" "\n"
      << R"({"ts":2000,"event":"samples","round":0,"window_ms":1000,"rank":[3],"step":[4],"step_ms":[10]})" "\n"
      << "{\"ts\":2001,\"event\":\"broken\n"
      << R"({"ts":2100,"event":"worker_exited","round":0,"rank":3,"outcome":"failed","exit":"exited with code 3"})" "\n"
      << R"({"ts":2200,"event":"round_end","round":0,"outcome":"worker_failed","root_cause":{"rank":3,"node":1,"host":"h","what":"exited with code 3"}})"
         "\n"
      << R"({"ts":2300,"event":"round_start","round":1,"nodes":2})" "\n"
      << R"({"ts":2400,"event":"diagnosis","kind":"hang","ranks":[3],"message":"m","fix":"f"})" "\n"
      << R"({"ts":3000,"event":"job_end","outcome":"failed","exit_code":3})" "\n";
  const auto run = read_run(dir.string());
  REQUIRE(run.ok());
  const RunModel& m = run.value;
  CHECK(m.job_id == "j-1");
  CHECK(m.command == std::vector<std::string>{"a", "b"});
  CHECK(m.rounds.size() == 2);
  CHECK(m.restarts() == 1);
  CHECK(m.rounds[0].root_cause == "rank 3 on node 1 (h): exited with code 3");
  CHECK(m.ranks() == 4);
  CHECK(m.samples.size() == 1);
  CHECK(m.outcome == "failed");
  CHECK(m.exit_code == 3);
  CHECK(m.end_ms == 3000);
  CHECK(m.marks.size() == 2);   // the failure and the diagnosis
  CHECK(m.diagnoses.size() == 1);   // no status.json: the logged ones
  CHECK(m.stacks_files == std::vector<std::string>{"attempt_0/stacks/rank_1.txt"});
  const auto page = write_report(dir.string());
  REQUIRE(page.ok());
  CHECK(fs::file_size(page.value) > 1000);
  fs::remove_all(dir);
}

TEST_CASE("a directory without an event log is refused with what to pass instead") {
  const auto run = read_run("/nonexistent-run-dir");
  CHECK_FALSE(run.ok());
  CHECK(run.status.message().find("no event log at /nonexistent-run-dir/events.jsonl") != std::string::npos);
}
