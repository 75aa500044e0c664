#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "cli/controller/observe/run_dirs.h"
#include "temp_dir.h"

using namespace dtrain::controller;
namespace fs = std::filesystem;

namespace {

void job(const fs::path& dir, const std::string& first_event) {
  fs::create_directories(dir);
  std::ofstream(dir / "events.jsonl") << first_event << "\n";
}

}  // namespace

TEST_CASE("find_run_dir: the newest job by its job_start time, a job id, a directory, and what to pass otherwise") {
  TempDir temp("run-dirs");
  const fs::path runs = fs::path(temp.path) / "runs";
  job(runs / "b-late", R"({"ts":2000,"event":"job_start"})");
  job(runs / "a-early", R"({"ts":1000,"event":"job_start"})");
  fs::create_directories(runs / "not-a-job");
  CHECK(find_run_dir("", "status", runs.string()).value == (runs / "b-late").string());
  CHECK(find_run_dir("a-early", "status", runs.string()).value == (runs / "a-early").string());
  CHECK(find_run_dir((runs / "a-early").string(), "report", runs.string()).value == (runs / "a-early").string());

  const auto other = find_run_dir("not-a-job", "report", runs.string());
  CHECK_FALSE(other.ok());
  CHECK(other.status.message().find("not-a-job is neither a job's directory") != std::string::npos);
  CHECK(other.status.message().find("run `dtrain report` where it ran") != std::string::npos);

  const auto none = find_run_dir("", "report", (runs / "not-a-job").string());
  CHECK_FALSE(none.ok());
  CHECK(none.status.message().find("dtrain report RUN_DIR") != std::string::npos);
}
