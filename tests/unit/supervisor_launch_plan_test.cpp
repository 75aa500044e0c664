// plan_launch, search_path and open_log_file: the status code each spawn failure carries, and the message users
// read (the same text the supervisor puts in ProcessExit::spawn_error).

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "agent/supervisor/output/output_capture.h"
#include "agent/supervisor/process/spawn.h"
#include "tests/unit/temp_dir.h"

using dtrain::StatusCode;
using namespace dtrain::supervisor;

namespace {

ProcessSpec command(std::vector<std::string> argv) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  return spec;
}

void write_file(const std::string& path, std::filesystem::perms perms) {
  std::ofstream(path) << "#!/bin/sh\n";
  std::filesystem::permissions(path, perms);
}

}  // namespace

TEST_CASE("plan_launch: a good spec gives a plan with the program found on PATH") {
  const auto planned = plan_launch(command({"sh", "-c", "true"}));
  REQUIRE(planned.ok());
  CHECK(planned.value.program.ends_with("/sh"));
  CHECK(planned.value.argv.size() == 3);
}

TEST_CASE("plan_launch: a broken spec fails with invalid_argument and says what is wrong") {
  const auto empty = plan_launch(command({}));
  CHECK(empty.status.code() == StatusCode::invalid_argument);
  CHECK(empty.status.message() == "cannot execute: empty command (argv)");

  ProcessSpec bad_env = command({"/bin/true"});
  bad_env.env["A=B"] = "1";
  const auto env = plan_launch(bad_env);
  CHECK(env.status.code() == StatusCode::invalid_argument);
  CHECK(env.status.message() ==
        "invalid environment variable name 'A=B' for '/bin/true': it must be non-empty and must not contain '='");

  ProcessSpec bad_cpu = command({"/bin/true"});
  bad_cpu.cpus = {1U << 20};
  const auto cpu = plan_launch(bad_cpu);
  CHECK(cpu.status.code() == StatusCode::invalid_argument);
  CHECK(cpu.status.message() == "cannot bind '/bin/true' to cpu 1048576: no such cpu");
}

TEST_CASE("search_path: not_found when nothing matches, permission_denied when only non-executables do") {
  TempDir dir("dtrain-launch-plan");
  const auto missing = search_path("dtrain-no-such-program", dir.path, "");
  CHECK(missing.status.code() == StatusCode::not_found);
  CHECK(missing.status.message() ==
        "cannot execute 'dtrain-no-such-program': No such file or directory (PATH=" + dir.path + ")");

  write_file(dir.file("tool"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const auto denied = search_path("tool", dir.path, "");
  // No execute bit at all: refused even to root.
  CHECK(denied.status.code() == StatusCode::permission_denied);
  CHECK(denied.status.message() == "cannot execute 'tool': Permission denied (PATH=" + dir.path + ")");

  write_file(dir.file("tool"), std::filesystem::perms::owner_all);
  const auto found = search_path("tool", "/nonexistent:" + dir.path, "");
  REQUIRE(found.ok());
  CHECK(found.value == dir.file("tool"));
}

TEST_CASE("open_log_file: a file that cannot be opened fails with internal, naming the file") {
  TempDir dir("dtrain-launch-plan");
  const auto opened = open_log_file(dir.file("logs/worker.log"));
  REQUIRE(opened.ok());
  CHECK(opened.value >= 0);
  close(opened.value);

  std::filesystem::create_directory(dir.file("a-directory"));
  const auto refused = open_log_file(dir.file("a-directory"));
  CHECK(refused.status.code() == StatusCode::internal);
  CHECK(refused.status.message().starts_with("cannot open log file '" + dir.file("a-directory") + "': "));
}
