// The one /proc/PID/stat parser: fields counted from the command name's last ')', whatever the name holds; lines
// that are cut short or lack their pid refused as invalid_argument; this process read for real, a reaped child not
// found.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common/os/proc_stat.h"

using dtrain::parse_proc_stat;
using dtrain::read_proc_stat;
using dtrain::read_proc_stat_file;
using dtrain::StatusCode;

namespace {

// Fields 3 to 52 of a real line (a sleeping process with 7 threads), after "pid (comm)".
constexpr char kFields[] =
    " S 1 4242 4243 0 -1 4194560 100 0 0 0 350 50 0 0 20 0 7 0 12345 1000000 200 18446744073709551615 1 1 0 0 0 "
    "0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

}  // namespace

TEST_CASE("proc stat: a command name with spaces and \") (\" is skipped whole, up to its last ')'") {
  for (const std::string comm : {"a) (b", "x ) ( y", ") (", "((", "))", "trainer rank 0"}) {
    CAPTURE(comm);
    const auto stat = parse_proc_stat("4242 (" + comm + ")" + kFields);
    REQUIRE(stat.ok());
    CHECK(stat.value.pid == 4242);
    CHECK(stat.value.state == 'S');
    CHECK(stat.value.ppid == 1);
    CHECK(stat.value.pgid == 4242);
    CHECK(stat.value.sid == 4243);
    CHECK(stat.value.utime == 350);
    CHECK(stat.value.stime == 50);
    CHECK(stat.value.num_threads == 7);
  }
}

TEST_CASE("proc stat: a line cut before num_threads is invalid_argument, and says how many fields it had") {
  const std::string full = std::string("4242 (a) (b)") + kFields;
  // Cut after num_threads (field 20) it is still whole enough; any shorter is not.
  const std::size_t threads_end = full.find(" 7 ") + 2;
  CHECK(parse_proc_stat(full.substr(0, threads_end)).ok());
  for (std::size_t length : {threads_end - 2, full.find(" 350"), full.rfind(')') + 3, full.rfind(')') + 1}) {
    CAPTURE(length);
    const auto stat = parse_proc_stat(full.substr(0, length));
    CHECK(stat.status.code() == StatusCode::invalid_argument);
    CHECK(stat.status.message().find("fields after the command name") != std::string::npos);
  }
  CHECK(parse_proc_stat("4242 (a").status.code() == StatusCode::invalid_argument);
  CHECK(parse_proc_stat("").status.code() == StatusCode::invalid_argument);
}

TEST_CASE("proc stat: a line without its pid, or with a field that is not a number, is invalid_argument") {
  for (const std::string& line : {std::string("(a b)") + kFields, std::string(" (a b)") + kFields,
                                 std::string("x42 (a b)") + kFields, std::string("42 (a) S x") + (kFields + 4),
                                 std::string("42 (a) SS") + (kFields + 2)}) {
    CAPTURE(line);
    CHECK(parse_proc_stat(line).status.code() == StatusCode::invalid_argument);
  }
}

TEST_CASE("proc stat: this process is read for real; a reaped child and a missing file are not_found") {
  const auto self = read_proc_stat(::getpid());
  REQUIRE(self.ok());
  CHECK(self.value.pid == ::getpid());
  CHECK(self.value.state == 'R');   // it is reading its own stat
  CHECK(self.value.ppid == ::getppid());
  CHECK(self.value.pgid == ::getpgrp());
  CHECK(self.value.sid == ::getsid(0));
  CHECK(self.value.num_threads >= 1);
  const auto thread = read_proc_stat_file("/proc/self/task/" + std::to_string(::getpid()) + "/stat");
  REQUIRE(thread.ok());
  CHECK(thread.value.pid == ::getpid());

  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const auto gone = read_proc_stat(child);
  CHECK(gone.status.code() == StatusCode::not_found);
  CHECK(gone.status.message().find("/proc/" + std::to_string(child) + "/stat") != std::string::npos);
  CHECK(read_proc_stat_file("/nonexistent/stat").status.code() == StatusCode::not_found);
}
