// Per-step points in the samples events of events.jsonl (cli/report/model/samples.h) and the report page's curves
// drawn from them (progress_chart.h): a 30-step job of a few windows draws a line of a point per step.

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>

#include "cli/report/model/run_model.h"
#include "cli/report/model/samples.h"
#include "cli/report/progress_chart.h"
#include "cli/report/report.h"

namespace report_step_points_test {

using namespace dtrain::report;
using dtrain::StepPoint;
namespace fs = std::filesystem;

RankSample sample(unsigned rank, std::uint64_t step) {
  RankSample s;
  s.rank = rank;
  s.step = step;
  s.step_ms = 80;
  s.loss = 2;
  s.tokens_per_s = 1000;
  return s;
}

std::vector<StepPoint> steps(std::uint64_t first, std::uint64_t last) {
  std::vector<StepPoint> out;
  for (std::uint64_t s = first; s <= last; ++s) out.push_back({s, 3.0 - 0.01 * s, 80.125, 1000.0 + s});
  return out;
}

SampleWindow written(SampleRecorder& recorder, std::uint32_t round, std::uint64_t now_ms) {
  const auto fields = recorder.take(round, now_ms, true);
  REQUIRE(fields.has_value());
  nlohmann::ordered_json event = {{"ts", now_ms}, {"event", "samples"}};
  for (const auto& [key, value] : fields->items()) event[key] = value;
  return read_samples(event.dump());
}

TEST_CASE("a samples event carries the window's points of ranks below kMaxPointRanks, and they read back") {
  SampleRecorder recorder(0);
  for (unsigned rank : {0u, 1u, kMaxPointRanks}) {
    recorder.add(sample(rank, 10));
    recorder.add_points(rank, steps(1, 5));
    recorder.add_points(rank, steps(6, 10));
  }
  const SampleWindow window = written(recorder, 0, 1000);
  CHECK(window.ranks.size() == 3);
  REQUIRE(window.points.size() == 20);   // ranks 0 and 1, ten steps each; rank 64 carries none
  CHECK(window.points[0].rank == 0);
  CHECK(window.points[19].rank == 1);
  CHECK(window.points[19].point == StepPoint{10, 2.9, 80.13, 1010});   // losses 4 digits, times and rates 0.01
  // The points went with their window.
  recorder.add(sample(0, 11));
  CHECK(written(recorder, 0, 2000).points.empty());
}

TEST_CASE("a window's points are bounded per rank, and only a round's first kPointWindows windows carry them") {
  SampleRecorder recorder(0);
  recorder.add(sample(0, 500));
  for (std::uint64_t s = 1; s <= 500; s += 10) recorder.add_points(0, steps(s, s + 9));
  const SampleWindow window = written(recorder, 0, 1000);
  CHECK(window.points.size() <= kMaxWindowPoints);
  CHECK(window.points.front().point.step == 1);
  CHECK(window.points.back().point.step == 500);
  for (std::size_t w = 1; w < kPointWindows; ++w) {
    recorder.add(sample(0, 500 + w));
    recorder.add_points(0, steps(500 + w, 500 + w));
    CHECK(written(recorder, 0, 1000 + w).points.size() == 1);
  }
  recorder.add(sample(0, 700));
  recorder.add_points(0, steps(700, 700));
  const auto late = recorder.take(0, 5000, true);
  REQUIRE(late.has_value());
  CHECK(!late->contains("points"));   // no key at all: the log is as it was without points
  // A new round's first windows carry them again.
  recorder.add(sample(0, 3));
  recorder.add_points(0, steps(1, 3));
  CHECK(written(recorder, 1, 6000).points.size() == 3);
}

// The points of the first polyline of the chart `name` on `page`.
std::size_t line_points(const std::string& page, const std::string& name) {
  std::smatch found;
  const std::regex line("data-chart=\"" + name + "\"[^]*?<polyline[^>]*points=\"([^\"]*)\"");
  if (!std::regex_search(page, found, line)) return 0;
  std::size_t n = 0;
  const std::string points = found[1];
  for (std::size_t at = points.find(','); at != std::string::npos; at = points.find(',', at + 1)) ++n;
  return n;
}

// A 30-step job of two ranks whose launcher wrote 3 samples windows (steps 10, 20, 30), with or without points.
std::string run_dir(bool with_points) {
  const fs::path dir = fs::temp_directory_path() /
                       ("report-points-test-" + std::to_string(::getpid()) + (with_points ? "-p" : "-s"));
  fs::create_directories(dir);
  std::ofstream events(dir / "events.jsonl");
  events << R"({"ts":1000,"event":"job_start","job":"j-1","name":"j","command":["t"]})" "\n"
         << R"({"ts":1001,"event":"round_start","round":0,"nodes":1})" "\n";
  for (int w = 1; w <= 3; ++w) {
    events << R"({"ts":)" << 1000 + 900 * w << R"(,"event":"samples","round":0,"window_ms":900,"rank":[0,1],)"
           << R"("step":[)" << 10 * w << "," << 10 * w << R"(],"step_ms":[80,80],"loss":[2,2],)"
           << R"("tokens_per_s":[1000,1000])";
    if (with_points) {
      events << R"(,"points":[)";
      for (int rank = 0; rank < 2; ++rank) {
        for (int s = 10 * w - 9; s <= 10 * w; ++s) {
          events << (rank + s > 10 * w - 9 ? "," : "") << "[" << rank << "," << s << "," << 3.0 - 0.05 * s
                 << ",80," << 1000 + 10 * s << "]";
        }
      }
      events << "]";
    }
    events << "}\n";
  }
  events << R"({"ts":4000,"event":"job_end","outcome":"succeeded","exit_code":0})" "\n";
  return dir.string();
}

TEST_CASE("a 30-step job of 3 samples windows draws its loss and tokens/s a point per step from the points") {
  const std::string dir = run_dir(true);
  const auto run = read_run(dir);
  REQUIRE(run.ok());
  REQUIRE(run.value.samples.size() == 3);
  CHECK(run.value.samples[0].points.size() == 20);
  const auto page = write_report(dir);
  REQUIRE(page.ok());
  std::ifstream in(page.value);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(line_points(html, "loss") == 30);
  CHECK(line_points(html, "tokens_per_s") == 30);
  // Tokens/s of the job: the ranks' mean at a step times the round's 2 ranks.
  CHECK(progress_chart(run.value, Progress::tokens_per_s).find("data-chart") != std::string::npos);
  fs::remove_all(dir);

  // Without points (an older log): a point per window, as before.
  const std::string old = run_dir(false);
  const auto old_page = write_report(old);
  REQUIRE(old_page.ok());
  std::ifstream old_in(old_page.value);
  const std::string old_html((std::istreambuf_iterator<char>(old_in)), std::istreambuf_iterator<char>());
  CHECK(line_points(old_html, "loss") == 3);
  CHECK(line_points(old_html, "tokens_per_s") == 3);
  fs::remove_all(old);
}

}  // namespace report_step_points_test
