#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/report/page.h"
#include "cli/report/report.h"
#include "cli/report/tuning.h"
#include "cli/report/model/run_model.h"

using namespace dtrain::report;

// Named, not anonymous: the unit tests are compiled in unity batches.
namespace report_tuning_test {

namespace fs = std::filesystem;

// A fresh, empty directory under the temp directory.
fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("report-tuning-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A tune.json as `dtrain tune` writes one: the baseline, two measured candidates (the slower one first in the file),
// one failed, one whose loss changed; the fastest recommended; a hostile name on the slower one.
std::string tune_json(const std::string& baseline_run = "trials/demo-t00-1") {
  return R"({"version":1,"job":"demo","command":["python3","train.py"],"started_ms":1000,"ended_ms":601000,
    "budget_s":600,"warmup_steps":10,"trial_steps":30,"repeats":3,"ranks":2,"unit":"tokens",
    "bottleneck":"data","shares":{"data":0.6,"communication":0.1,"compute":0.3},
    "baseline_run":")" + baseline_run + R"J(",
    "candidates":[
      {"name":"baseline","status":"measured","trials":3,"rate":1000,"speedup":1,"ci":[0.97,1.03],
       "data_wait_ms":60,"comm_ms":4,"memory_bytes":2500000000,"loss_check":"n/a","note":""},
      {"name":"<script>alert(1)</script>","status":"measured","trials":3,"rate":1100,"speedup":1.1,
       "ci":[1.02,1.18],"data_wait_ms":40,"comm_ms":4,"memory_bytes":250000000,"loss_check":"same","note":""},
      {"name":"num_workers=4","status":"measured","trials":3,"rate":1420,"speedup":1.42,"ci":[1.30,1.55],
       "data_wait_ms":2.1,"comm_ms":0.4,"memory_bytes":2600000000,"loss_check":"same","note":""},
      {"name":"pin_memory","status":"failed","trials":1,"rate":0,"speedup":0,"ci":[0,0],"data_wait_ms":0,
       "comm_ms":0,"memory_bytes":0,"loss_check":"n/a","note":"rank 1 exited with code 1"},
      {"name":"bucket 4 MB","status":"loss_changed","trials":3,"rate":1600,"speedup":1.6,"loss_check":"differs",
       "note":"step 3's loss 2.1 vs 2.4"}],
    "recommended":2,"verdict":"num_workers=4 is 1.42x faster.",
    "lines":["DataLoader(ds, num_workers=4)","# <keep>"],"suggestions":["bf16 autocast"],"tune_yaml":"tune.yaml"})J";
}

// A tiny run directory, as the launcher writes one: a job of one round that succeeded.
void write_run(const fs::path& dir, const std::string& job) {
  write_file(dir / "events.jsonl",
             R"({"ts":1000,"event":"job_start","job":")" + job + R"(","name":"demo","command":["python3","train.py"]})"
             "\n"
             R"({"ts":1001,"event":"round_start","round":0,"nodes":1})" "\n"
             R"({"ts":2000,"event":"round_end","round":0,"outcome":"succeeded"})" "\n"
             R"({"ts":2001,"event":"job_end","outcome":"succeeded","exit_code":0})" "\n");
}

std::size_t at(const std::string& page, const std::string& what) {
  const std::size_t found = page.find(what);
  CHECK_MESSAGE(found != std::string::npos, "not in the page: ", what);
  return found;
}

}  // namespace report_tuning_test

using namespace report_tuning_test;

TEST_CASE("tuning: the table lists the candidates fastest first, the failed last, the recommended one marked") {
  const fs::path dir = fresh_dir("rank");
  write_file(dir / kTuneFileName, tune_json());
  const auto tune = read_tune(dir.string());
  REQUIRE(tune.ok());
  CHECK(tune.value.candidates.size() == 5);
  CHECK(tune_ranking(tune.value) == std::vector<std::size_t>{2, 1, 0, 3, 4});
  const std::string html = tuning_section(tune.value);
  const std::size_t first = at(html, "<tr data-candidate=\"2\" class=\"recommended\" data-recommended=\"1\">");
  const std::size_t second = at(html, "<tr data-candidate=\"1\">");
  const std::size_t third = at(html, "<tr data-candidate=\"0\">");
  const std::size_t fourth = at(html, "<tr data-candidate=\"3\">");
  const std::size_t fifth = at(html, "<tr data-candidate=\"4\">");
  CHECK(first < second);
  CHECK(second < third);
  CHECK(third < fourth);
  CHECK(fourth < fifth);
  CHECK(html.find("data-recommended") == html.rfind("data-recommended"));   // one row only
  at(html, "<b>num_workers=4</b> <b class=\"recommended-mark\">(recommended)</b>");
  at(html, "<td>1</td><td><b>num_workers=4</b>");
  at(html, "<td>1.42x [1.30, 1.55]</td>");
  at(html, "<td>1 (baseline)</td>");
  at(html, "<td>1420&nbsp;tokens/s</td>");
  at(html, "<td>2.6&nbsp;GB</td>");
  at(html, "<td>250&nbsp;MB</td>");
  at(html, "<td>2.1&nbsp;ms</td><td>0.4&nbsp;ms</td>");
  at(html, "<td>-</td><td>pin_memory</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td><td>n/a</td>");
  at(html, "failed: rank 1 exited with code 1");
  at(html, "loss_changed: step 3&#39;s loss 2.1 vs 2.4");
  at(html, "<p id=\"tune-verdict\"><b>num_workers=4 is 1.42x faster.</b></p>");
  at(html, "<pre id=\"tune-lines\">DataLoader(ds, num_workers=4)\n# &lt;keep&gt;\n</pre>");
  at(html, "<li>bf16 autocast</li>");
  at(html, "10 warm-up steps, then 30 measured steps; 3 repeats of each candidate; 2 ranks");
  at(html, "<td>budget</td><td>10 min 00 s</td>");
  at(html, "<td>time taken</td><td>10 min 00 s</td>");
  at(html, "data (of a step: ");
  at(html, "<code>--tune tune.yaml</code>");
  fs::remove_all(dir);
}

TEST_CASE("tuning: a hostile name is escaped, never markup") {
  const fs::path dir = fresh_dir("escape");
  write_file(dir / kTuneFileName, tune_json());
  const auto tune = read_tune(dir.string());
  REQUIRE(tune.ok());
  const std::string html = tuning_section(tune.value, "a <b>note</b>");
  CHECK(html.find("<script") == std::string::npos);
  at(html, "&lt;script&gt;alert(1)&lt;/script&gt;");
  at(html, "a &lt;b&gt;note&lt;/b&gt;");
  fs::remove_all(dir);
}

TEST_CASE("tuning: a tune directory's page is its baseline run's with the Tuning section after the header") {
  const fs::path dir = fresh_dir("page");
  write_file(dir / kTuneFileName, tune_json());
  write_file(dir / "events.jsonl", R"({"ts":1000,"event":"tune_start","job":"demo"})" "\n");
  write_run(dir / "trials" / "demo-t00-1", "demo-t00-1");
  CHECK(is_tune_dir(dir.string()));
  const auto written = write_report(dir.string());
  REQUIRE(written.ok());
  CHECK(written.value == (dir / kReportFileName).string());
  const std::string page = read_text(written.value);
  const std::size_t header = at(page, "</header>");
  const std::size_t tuning = at(page, "<section id=\"tuning\"><h2>Tuning</h2>");
  const std::size_t progress = at(page, "<section id=\"progress\">");
  CHECK(header < tuning);
  CHECK(tuning < progress);
  at(page, "dtrain job demo-t00-1");
  CHECK(page.find("id=\"tune-note\"") == std::string::npos);
  CHECK(page.find("<script") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "trials" / "demo-t00-1" / kReportFileName));
  fs::remove_all(dir);
}

TEST_CASE("tuning: without its baseline run the page has the Tuning section only, and says so") {
  const fs::path dir = fresh_dir("missing");
  write_file(dir / kTuneFileName, tune_json());
  const auto written = write_report(dir.string());
  REQUIRE(written.ok());
  const std::string page = read_text(written.value);
  at(page, "<h1>dtrain tune demo</h1>");
  at(page, "The baseline run is missing: no event log at ");
  at(page, "This page has the Tuning section only.");
  at(page, "<section id=\"tuning\">");
  at(page, "default-src 'none'");
  CHECK(page.find("<section id=\"progress\">") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("tuning: a baseline run outside the tune directory is refused, and nothing there is read") {
  CHECK_FALSE(baseline_run_dir("/t", "../elsewhere").ok());
  CHECK_FALSE(baseline_run_dir("/t", "trials/../../elsewhere").ok());
  CHECK_FALSE(baseline_run_dir("/t", "/etc").ok());
  CHECK_FALSE(baseline_run_dir("/t", "").ok());
  CHECK_FALSE(baseline_run_dir("/t", ".").ok());
  CHECK_FALSE(baseline_run_dir("/t", std::string("trials/a\0b", 10)).ok());
  const auto inside = baseline_run_dir("/t", "trials/x");
  REQUIRE(inside.ok());
  CHECK(inside.value == "/t/trials/x");
  CHECK(baseline_run_dir("/t", "trials/x..y").ok());   // ".." only as a whole component

  const fs::path root = fresh_dir("escape-root");
  write_run(root / "outside", "outside-job");
  write_file(root / "tune" / kTuneFileName, tune_json("../outside"));
  const auto written = write_report((root / "tune").string());
  REQUIRE(written.ok());
  const std::string page = read_text(written.value);
  at(page, "the baseline run&#39;s path &quot;../outside&quot; in tune.json is refused");
  CHECK(page.find("outside-job") == std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("tuning: a tune.json over 1 MiB, not a file, not JSON (non-finite numbers) or not an object is refused") {
  const fs::path dir = fresh_dir("large");
  write_file(dir / kTuneFileName, "{\"job\":\"" + std::string(kMaxTuneFileBytes, 'x') + "\"}");
  auto tune = read_tune(dir.string());
  CHECK(tune.status.code() == dtrain::StatusCode::invalid_argument);
  CHECK(tune.status.message().find("at most 1 MiB") != std::string::npos);
  CHECK_FALSE(write_report(dir.string()).ok());
  CHECK_FALSE(fs::exists(dir / kReportFileName));
  for (const char* not_json : {R"({"budget_s":1e999})", R"({"rate":NaN})", R"({"rate":-Infinity})", "[1,2,3]"}) {
    write_file(dir / kTuneFileName, not_json);
    CHECK(read_tune(dir.string()).status.code() == dtrain::StatusCode::invalid_argument);
  }
  CHECK(read_tune(dir.string()).status.code() == dtrain::StatusCode::invalid_argument);
  write_file(dir / kTuneFileName, std::string(500'000, '[') + std::string(500'000, ']'));
  CHECK(read_tune(dir.string()).status.code() == dtrain::StatusCode::invalid_argument);
  fs::remove(dir / kTuneFileName);
  fs::create_directory(dir / kTuneFileName);
  CHECK(read_tune(dir.string()).status.code() == dtrain::StatusCode::invalid_argument);
  fs::remove_all(dir);
  CHECK(read_tune(dir.string()).status.code() == dtrain::StatusCode::not_found);
}

TEST_CASE("tuning: fields of the wrong type, out-of-range numbers and huge lists are read as absent or capped") {
  const fs::path dir = fresh_dir("types");
  std::string many = "[";
  for (int i = 0; i < 1000; ++i) many += std::string(i ? "," : "") + R"({"name":"c)" + std::to_string(i) + R"("})";
  many += "]";
  write_file(dir / kTuneFileName,
             R"({"job":7,"command":"python3","started_ms":"x","ended_ms":-5,"budget_s":1e308,"warmup_steps":[1],
                 "trial_steps":{"a":1},"repeats":null,"ranks":-2,"unit":{"x":1},"bottleneck":false,
                 "shares":[1,2],"baseline_run":12,"recommended":"1","verdict":["v"],"lines":"x",
                 "suggestions":[1,"ok",null],"tune_yaml":true,"candidates":)" + many + "}");
  auto tune = read_tune(dir.string());
  REQUIRE(tune.ok());
  const TuneSummary& t = tune.value;
  CHECK(t.job.empty());
  CHECK(t.command.empty());
  CHECK_FALSE(t.started_ms);
  CHECK_FALSE(t.ended_ms);
  CHECK(t.budget_s == 1e308);
  CHECK_FALSE(t.warmup_steps);
  CHECK_FALSE(t.ranks);
  CHECK(t.candidates.size() == kMaxTuneCandidates);
  CHECK(t.candidates_left_out == 1000 - kMaxTuneCandidates);
  CHECK(t.recommended == -1);
  CHECK(t.suggestions == std::vector<std::string>{"ok"});
  const std::string html = tuning_section(t);
  at(html, "744 more candidates not shown");
  at(html, "tune.json has no verdict.");
  at(html, "<td>budget</td><td>-</td>");

  write_file(dir / kTuneFileName,
             R"({"candidates":[7,"x",null,{"name":["n"],"status":3,"rate":"fast","speedup":-1e308,"ci":[1,"2"],
                 "memory_bytes":-1,"trials":-1e-999},{"ci":[1,2,3],"speedup":1e308,"rate":1e308,"status":"measured"}],
                 "recommended":99})");
  tune = read_tune(dir.string());
  REQUIRE(tune.ok());
  REQUIRE(tune.value.candidates.size() == 5);
  const TuneCandidate& c = tune.value.candidates[3];
  CHECK(c.name.empty());
  CHECK_FALSE(c.rate);
  CHECK_FALSE(c.speedup);
  CHECK_FALSE(c.ci);
  CHECK_FALSE(c.memory_bytes);
  CHECK(c.trials == 0.0);   // -1e-999 reads as -0
  CHECK_FALSE(tune.value.candidates[4].ci);
  CHECK(tune.value.candidates[4].speedup == 1e308);
  CHECK(tune.value.recommended == -1);
  const std::string huge = tuning_section(tune.value);
  at(huge, "(unnamed)");
  at(huge, "<td>1e+302M&nbsp;units/s</td><td>1e+302Mx</td>");
  // The page of it: no baseline run named, so the section alone.
  const auto written = write_report(dir.string());
  REQUIRE(written.ok());
  at(read_text(written.value), "tune.json names no baseline run");
  fs::remove_all(dir);
}

TEST_CASE("tuning: a run directory is not a tune directory, even with a tune.json in it") {
  const fs::path dir = fresh_dir("run");
  write_run(dir, "plain-job");
  CHECK_FALSE(is_tune_dir(dir.string()));
  const auto before = write_report(dir.string());
  REQUIRE(before.ok());
  const std::string plain = read_text(before.value);
  write_file(dir / kTuneFileName, tune_json("."));
  CHECK_FALSE(is_tune_dir(dir.string()));
  const auto after = write_report(dir.string());
  REQUIRE(after.ok());
  CHECK(read_text(after.value) == plain);
  CHECK(plain.find("id=\"tuning\"") == std::string::npos);
  fs::remove_all(dir);
}
