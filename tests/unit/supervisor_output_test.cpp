#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "agent/supervisor/testing/event_recorder.h"
#include "tests/unit/read_file.h"

using namespace dtrain::supervisor;
using namespace std::chrono_literals;
using dtrain::supervisor::testing::EventRecorder;
using dtrain::supervisor::testing::shell;

TEST_CASE("output: stdout and stderr lines reach the callback and the log file, partial last line included") {
  const auto dir = std::filesystem::temp_directory_path() / ("dtrain-supervisor-logs-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const auto log = dir / "nested" / "rank0.log";  // parent directories do not exist yet
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec spec = shell(1, "echo out1; echo err1 >&2; echo; echo out2; printf 'no newline'");
  spec.log_path = log.string();
  supervisor.spawn({spec});
  REQUIRE(recorder.wait_exit(1));
  CHECK(recorder.texts(1, false) == std::vector<std::string>{"out1", "", "out2", "no newline"});
  CHECK(recorder.texts(1, true) == std::vector<std::string>{"err1"});
  // stdout and stderr are separate pipes, so only each stream's own bytes and order are fixed in the shared file:
  // stderr's line lands whole somewhere (possibly right after stdout's last line without '\n', as on a terminal),
  // and what is left is exactly stdout.
  const std::string first = read_file(log);
  const auto err_at = first.find("err1\n");
  REQUIRE(err_at != std::string::npos);
  CHECK(first.substr(0, err_at) + first.substr(err_at + 5) == "out1\n\nout2\nno newline");

  // A second run appends (the log is written before exited is emitted).
  spec.id = 2;
  supervisor.spawn({spec});
  REQUIRE(recorder.wait_exit(2));
  // Byte for byte: the first run's "no newline" has no '\n' after it in the file either.
  const std::string text = read_file(log);
  CHECK(std::count(text.begin(), text.end(), '\n') == 8);
  CHECK(text.find("no newline") != std::string::npos);
  CHECK(text.size() == 2 * std::string("out1\nerr1\n\nout2\nno newline").size());
  std::filesystem::remove_all(dir);
}

TEST_CASE("output: the log file holds exactly the bytes the worker wrote, however long its lines") {
  const auto dir = std::filesystem::temp_directory_path() / ("dtrain-supervisor-exact-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const auto log = dir / "rank0.log";
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  // 3 MB without a newline (48 pieces on the line view), bytes that are not UTF-8, a 3-byte character repeated
  // across piece boundaries, and a last line without '\n'.
  ProcessSpec spec = shell(1, "head -c 3000000 /dev/zero | tr '\\0' x; printf 'err\\377\\n' >&2; "
                              "i=0; while [ $i -lt 30000 ]; do printf '\\342\\202\\254'; i=$((i+1)); done; echo; "
                              "printf 'end'");
  spec.log_path = log.string();
  supervisor.spawn({spec});
  REQUIRE(recorder.wait_exit(1, std::chrono::seconds(60)));
  const std::string text = read_file(log);
  std::string euros;
  for (int i = 0; i < 30000; ++i) euros += "\xE2\x82\xAC";
  const std::string out = std::string(3000000, 'x') + euros + "\nend";
  // stderr's one line lands between stdout's reads; without it, stdout's bytes are exactly the file's.
  const std::string err = "err\377\n";
  const auto at = text.find(err);
  REQUIRE(at != std::string::npos);
  CHECK(text.size() == out.size() + err.size());
  CHECK((text.substr(0, at) + text.substr(at + err.size()) == out));
  CHECK(recorder.texts(1, false).size() > 40);  // the line view was cut into pieces
  std::filesystem::remove_all(dir);
}

TEST_CASE("output: a log file that cannot be written is reported once, and the lost bytes are counted") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec spec = shell(1, "seq 1 1000; echo done >&2");
  spec.log_path = "/dev/full";  // every write fails with ENOSPC, as on a full disk
  supervisor.spawn({spec});
  const auto exit = recorder.wait_exit(1);
  REQUIRE(exit);
  CHECK(exit->exit.exit_code == 0);
  CHECK(exit->exit.log_error.find("No space left on device") != std::string::npos);
  CHECK(exit->exit.log_error.find("/dev/full") != std::string::npos);
  // seq 1 1000 writes 3893 bytes and "done\n" 5: all of it was lost.
  CHECK(exit->exit.log_bytes_lost == 3893 + 5);
  const auto order = recorder.order(1);
  CHECK(std::count_if(order.begin(), order.end(), [](const std::string& e) { return e.rfind("log_failed", 0) == 0; }) == 1);
  CHECK(recorder.texts(1, false).size() == 1000);  // the line view is unaffected
}

TEST_CASE("output: a 200 KiB line arrives in 64 KiB pieces") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({shell(1, "head -c 204800 /dev/zero | tr '\\0' x; echo; echo after")});
  REQUIRE(recorder.wait_exit(1));
  const auto out = recorder.texts(1, false);
  REQUIRE(out.size() == 5);
  CHECK(out[0] == std::string(65536, 'x'));
  CHECK(out[1].size() == 65536);
  CHECK(out[2].size() == 65536);
  CHECK(out[3] == std::string(204800 - 3 * 65536, 'x'));
  CHECK(out[4] == "after");
}

TEST_CASE("output: every line written right before exit is delivered before exited") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  // Several workers exiting together: one SIGCHLD reaps workers whose pipes the loop has not read yet. Each writes
  // far more than a pipe buffer, the last lines immediately before exit.
  constexpr std::uint64_t kWorkers = 6;
  std::vector<ProcessSpec> specs;
  for (std::uint64_t id = 1; id <= kWorkers; ++id) {
    specs.push_back(shell(id, "seq 1 20000; echo last-out; echo last-err >&2; printf tail-no-newline; exit 5"));
  }
  supervisor.spawn(specs);
  for (std::uint64_t id = 1; id <= kWorkers; ++id) {
    CAPTURE(id);
    const auto exit = recorder.wait_exit(id);
    REQUIRE(exit);
    CHECK(exit->exit.exit_code == 5);
    CHECK(exit->lines_before == 20000 + 3);
    const auto out = recorder.texts(id, false);
    REQUIRE(out.size() == 20002);
    CHECK(out[0] == "1");
    CHECK(out[19999] == "20000");
    CHECK(out[20000] == "last-out");
    CHECK(out[20001] == "tail-no-newline");
    CHECK(exit->exit.stderr_tail == std::vector<std::string>{"last-err"});
  }
}

TEST_CASE("output: the stderr tail keeps the last lines") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec three = shell(2, "for i in 1 2 3 4 5; do echo e$i >&2; echo o$i; done");
  three.stderr_tail_lines = 3;
  ProcessSpec none = shell(3, "echo e >&2");
  none.stderr_tail_lines = 0;
  supervisor.spawn({shell(1, "i=1; while [ $i -le 50 ]; do echo e$i >&2; i=$((i+1)); done; exit 1"), three, none});
  const auto exit = recorder.wait_exit(1);
  REQUIRE(exit);
  std::vector<std::string> expected;
  for (int i = 31; i <= 50; ++i) expected.push_back("e" + std::to_string(i));
  CHECK(exit->exit.stderr_tail == expected);
  CHECK(recorder.wait_exit(2)->exit.stderr_tail == std::vector<std::string>{"e3", "e4", "e5"});
  REQUIRE(recorder.wait_exit(3));
  CHECK(recorder.wait_exit(3)->exit.stderr_tail.empty());
}

TEST_CASE("output: exited does not wait for a grandchild that keeps the pipe, whose later lines still arrive") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({shell(1, "(sleep 0.5; echo late) & echo early; exit 0")});
  const auto exit = recorder.wait_exit(1);
  REQUIRE(exit);
  CHECK(exit->exit.runtime < 400ms);
  CHECK(exit->lines_before == 1);
  CHECK(recorder.wait_lines(1, 2, 5s));
  CHECK(recorder.texts(1, false) == std::vector<std::string>{"early", "late"});
}
