// The rule for paths a launcher names: an agent places a job's logs and error files under <run_dir>/<job id> and
// refuses anything that leads outside, whether by an absolute path, "..", or a symlink planted on the way.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "agent/job/run_dir.h"
#include "tests/unit/temp_dir.h"

using dtrain::agent::JobFiles;
using dtrain::agent::read_placed_file;

namespace {

constexpr char kRunDirJob[] = "tiny-20261130-120000";

std::string refusal(const JobFiles& files, const std::string& name) {
  return files.place(name, "rank 0's error_file").status.message();
}

JobFiles job_files(const std::string& run_dir) {
  const auto files = JobFiles::for_job(run_dir, kRunDirJob);
  REQUIRE(files.ok());
  return files.value;
}

}  // namespace

TEST_CASE("names inside the job's directory are placed there, with their directories created") {
  TempDir run("dtrain-run-dir-test");
  const JobFiles files = job_files(run.path);
  CHECK(files.dir() == run.path + "/" + kRunDirJob);
  CHECK(files.place("attempt_0/rank_2.log", "rank 2's log_path").value == files.dir() + "/attempt_0/rank_2.log");
  CHECK(std::filesystem::is_directory(files.dir() + "/attempt_0"));
  // An absolute name inside the job's directory is the same file (launchers of provider local see that path).
  CHECK(files.place(files.dir() + "/attempt_1/./rank_0_error.json", "x").value ==
        files.dir() + "/attempt_1/rank_0_error.json");
}

TEST_CASE("names outside the job's directory are refused with what is allowed") {
  TempDir run("dtrain-run-dir-test");
  const JobFiles files = job_files(run.path);
  const std::vector<std::string> names = {"/etc/shadow", "../other-job/rank_0.log", "attempt_0/../../x", "/", "", ".",
                                         run.path + "/" + kRunDirJob, run.path + "/" + kRunDirJob + "-evil/rank_0.log"};
  for (const std::string& name : names) {
    const std::string why = refusal(files, name);
    CHECK_MESSAGE(why.find("rank 0's error_file '" + name + "' is outside this job's directory") == 0, why);
    CHECK(why.find("name them relative to it, like attempt_0/rank_0.log") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(run.path + "/other-job"));
}

TEST_CASE("a symlink on the way or in the file's place is refused, not followed") {
  TempDir run("dtrain-run-dir-test");
  TempDir elsewhere("dtrain-run-dir-elsewhere");
  const JobFiles files = job_files(run.path);
  SUBCASE("the attempt directory is a symlink") {
    std::filesystem::create_directories(files.dir());
    std::filesystem::create_directory_symlink(elsewhere.path, files.dir() + "/attempt_0");
    CHECK(refusal(files, "attempt_0/rank_0.log").find("is a symlink or not a directory") != std::string::npos);
  }
  SUBCASE("the job directory is a symlink") {
    std::filesystem::create_directory_symlink(elsewhere.path, files.dir());
    CHECK(refusal(files, "attempt_0/rank_0.log").find("is a symlink or not a directory") != std::string::npos);
  }
  SUBCASE("the file is a symlink") {
    std::filesystem::create_directories(files.dir() + "/attempt_0");
    std::filesystem::create_symlink("/etc/passwd", files.dir() + "/attempt_0/rank_0_error.json");
    CHECK(refusal(files, "attempt_0/rank_0_error.json").find("is not a regular file") != std::string::npos);
    // A worker may plant the link after placement: reading it back refuses too.
    CHECK_FALSE(read_placed_file(files.dir() + "/attempt_0/rank_0_error.json", 1024).ok());
  }
  CHECK(std::filesystem::is_empty(elsewhere.path));
}

TEST_CASE("read_placed_file reads a bounded prefix, and nothing of a missing file") {
  TempDir run("dtrain-run-dir-test");
  const std::string path = run.file("error.json");
  const auto missing = read_placed_file(path, 16);
  CHECK(missing.ok());
  CHECK(missing.value.empty());
  std::ofstream(path) << std::string(100, 'x');
  const auto prefix = read_placed_file(path, 16);
  CHECK(prefix.ok());
  CHECK(prefix.value == std::string(16, 'x'));
}

TEST_CASE("a job id must be one safe directory name") {
  TempDir run("dtrain-run-dir-test");
  for (const char* bad : {"", ".", "..", "../x", "a/b"}) CHECK_FALSE(JobFiles::for_job(run.path, bad).ok());
}
