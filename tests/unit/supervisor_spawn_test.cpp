#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <atomic>

#include "agent/supervisor/testing/event_recorder.h"

using namespace dtrain::supervisor;
using namespace std::chrono_literals;
using dtrain::supervisor::testing::EventRecorder;

namespace {

ProcessSpec command(std::uint64_t id, std::vector<std::string> argv) {
  ProcessSpec spec;
  spec.id = id;
  spec.argv = std::move(argv);
  return spec;
}

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dtrain-supervisor-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_file(const std::filesystem::path& path, const std::string& text, std::filesystem::perms perms) {
  std::ofstream(path) << text;
  std::filesystem::permissions(path, perms);
}

}  // namespace

TEST_CASE("spawn: exit codes of /bin/true and sh -c 'exit 3', with started before exited") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({command(1, {"/bin/true"}), command(2, {"sh", "-c", "exit 3"})});
  const auto ok = recorder.wait_exit(1);
  const auto three = recorder.wait_exit(2);
  REQUIRE(ok);
  REQUIRE(three);
  CHECK(ok->exit.exit_code == 0);
  CHECK(ok->exit.signal == 0);
  CHECK(ok->exit.spawn_error.empty());
  CHECK_FALSE(ok->exit.stopped);
  CHECK(ok->exit.pid > 0);
  CHECK(three->exit.exit_code == 3);
  CHECK(recorder.order(1) == std::vector<std::string>{"started", "exited"});
  CHECK(supervisor.running() == 0);
}

TEST_CASE("spawn: a worker killed by SIGKILL reports signal 9, and the exit is seen at once") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({command(1, {"sleep", "300"})});
  CHECK(supervisor.running() == 1);
  const auto pid = recorder.wait_started(1);
  REQUIRE(pid);
  const auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(kill(*pid, SIGKILL) == 0);
  const auto exit = recorder.wait_exit(1);
  REQUIRE(exit);
  CHECK(exit->exit.signal == SIGKILL);
  CHECK(exit->exit.exit_code == 128 + SIGKILL);
  CHECK(exit->exit.pid == *pid);
  const auto latency = std::chrono::duration_cast<std::chrono::microseconds>(exit->seen_at - killed_at);
  MESSAGE("exit notification after kill(SIGKILL): " << latency.count() << " us");
  CHECK(latency < 100ms);
  CHECK(supervisor.running() == 0);
}

TEST_CASE("spawn: a natural exit is reported within 100 ms of the process ending") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  // date prints the wall clock in ns as its last act; the exit follows at once.
  supervisor.spawn({command(1, {"sh", "-c", "sleep 0.2; exec date +%s%N"})});
  const auto exit = recorder.wait_exit(1);
  REQUIRE(exit);
  const auto out = recorder.texts(1, false);
  REQUIRE(out.size() == 1);
  const std::chrono::system_clock::time_point printed{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(std::stoll(out[0])))};
  const auto latency = std::chrono::duration_cast<std::chrono::microseconds>(exit->seen_wall - printed);
  MESSAGE("exit notification after the process's last write: " << latency.count() << " us");
  CHECK(latency >= 0us);
  CHECK(latency < 100ms);
  // From before the spawn to the exit: at least the 0.2 s sleep, less the millisecond runtime's truncation and this
  // machine's clock (a loaded VM once measured 198 ms), but nowhere near the exit-to-report latency alone.
  CHECK(exit->exit.runtime >= 190ms);
}

TEST_CASE("spawn: a missing program is a spawn error that names it and the PATH searched") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec spec = command(7, {"dtrain-no-such-program", "--flag"});
  spec.env["PATH"] = "/nonexistent-a:/nonexistent-b";
  supervisor.spawn({spec});
  // spawn() returns after the failure was reported.
  const auto exit = recorder.wait_exit(7, 0ms);
  REQUIRE(exit);
  CHECK(exit->exit.spawn_error ==
        "cannot execute 'dtrain-no-such-program': No such file or directory (PATH=/nonexistent-a:/nonexistent-b)");
  CHECK(exit->exit.exit_code == 127);
  CHECK(exit->exit.pid == 0);
  CHECK(recorder.order(7) == std::vector<std::string>{"exited"});
  CHECK(supervisor.running() == 0);
}

TEST_CASE("spawn: exec, working directory and cpu failures carry the exact reason") {
  const auto dir = temp_dir("errors");
  write_file(dir / "not-executable", "#!/bin/sh\necho hi\n", std::filesystem::perms::owner_read);
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec no_exec = command(1, {(dir / "not-executable").string()});
  ProcessSpec no_dir = command(2, {"/bin/true"});
  no_dir.working_dir = (dir / "missing").string();
  ProcessSpec bad_cpu = command(3, {"/bin/true"});
  bad_cpu.cpus = {1000};  // no machine here has it
  ProcessSpec empty = command(4, {});
  supervisor.spawn({no_exec, no_dir, bad_cpu, empty});
  const auto e1 = recorder.wait_exit(1, 0ms);
  const auto e2 = recorder.wait_exit(2, 0ms);
  const auto e3 = recorder.wait_exit(3, 0ms);
  const auto e4 = recorder.wait_exit(4, 0ms);
  REQUIRE((e1 && e2 && e3 && e4));
  // No x bit at all: even root gets EACCES.
  CHECK(e1->exit.spawn_error == "cannot execute '" + (dir / "not-executable").string() + "': Permission denied");
  CHECK(e1->exit.pid > 0);  // it forked; exec failed
  CHECK(e2->exit.spawn_error ==
        "cannot change to working directory '" + no_dir.working_dir + "' for '/bin/true': No such file or directory");
  CHECK(e3->exit.spawn_error.find("cannot bind '/bin/true' to cpus 1000: Invalid argument") == 0);
  CHECK(e4->exit.spawn_error == "cannot execute: empty command (argv)");
  CHECK(supervisor.running() == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("spawn: env is set on top of ours, PATH comes from the spec's env, else ours") {
  const auto dir = temp_dir("path");
  write_file(dir / "dtrain-test-tool", "#!/bin/sh\necho found-it \"$@\"\n", std::filesystem::perms::owner_all);
  setenv("DTRAIN_TEST_INHERITED", "from-agent", 1);
  setenv("DTRAIN_TEST_OVERRIDDEN", "agent-value", 1);
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec env = command(1, {"sh", "-c", "echo $DTRAIN_TEST_INHERITED $DTRAIN_TEST_OVERRIDDEN $DTRAIN_TEST_NEW"});
  env.env = {{"DTRAIN_TEST_OVERRIDDEN", "spec-value"}, {"DTRAIN_TEST_NEW", "new value"}};
  ProcessSpec tool = command(2, {"dtrain-test-tool", "a b"});
  tool.env["PATH"] = "/nonexistent:" + dir.string() + ":/usr/bin:/bin";
  ProcessSpec ours = command(3, {"env"});  // found through our own PATH
  supervisor.spawn({env, tool, ours});
  REQUIRE(recorder.wait_exit(1));
  REQUIRE(recorder.wait_exit(2));
  REQUIRE(recorder.wait_exit(3));
  CHECK(recorder.texts(1, false) == std::vector<std::string>{"from-agent spec-value new value"});
  CHECK(recorder.texts(2, false) == std::vector<std::string>{"found-it a b"});
  CHECK(recorder.wait_exit(2)->exit.exit_code == 0);
  const auto env_lines = recorder.texts(3, false);
  CHECK(std::find(env_lines.begin(), env_lines.end(), "DTRAIN_TEST_INHERITED=from-agent") != env_lines.end());
  unsetenv("DTRAIN_TEST_INHERITED");
  unsetenv("DTRAIN_TEST_OVERRIDDEN");
  std::filesystem::remove_all(dir);
}

TEST_CASE("spawn: working directory, stdin from /dev/null, own process group") {
  const auto dir = temp_dir("cwd");
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec spec = command(1, {"sh", "-c", "pwd; cat; echo stdin-closed; ps -o pgid= -p $$ | tr -d ' '; echo $$"});
  spec.working_dir = dir.string();
  supervisor.spawn({spec});
  const auto exit = recorder.wait_exit(1);
  REQUIRE(exit);
  const auto out = recorder.texts(1, false);
  REQUIRE(out.size() == 4);
  CHECK(out[0] == std::filesystem::canonical(dir).string());
  CHECK(out[1] == "stdin-closed");
  CHECK(out[2] == out[3]);  // process group id == its pid
  CHECK(out[3] == std::to_string(exit->exit.pid));
  std::filesystem::remove_all(dir);
}

TEST_CASE("spawn: cpus binding is visible in /proc/<pid>/status") {
  cpu_set_t ours;
  REQUIRE(sched_getaffinity(0, sizeof ours, &ours) == 0);
  unsigned last = 0;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &ours)) last = cpu;
  }
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec bound = command(1, {"sleep", "300"});
  bound.cpus = {last};
  ProcessSpec inherit = command(2, {"grep", "Cpus_allowed_list", "/proc/self/status"});
  supervisor.spawn({bound, inherit});
  const auto pid = recorder.wait_started(1);
  REQUIRE(pid);
  std::ifstream status("/proc/" + std::to_string(*pid) + "/status");
  std::string line, allowed;
  while (std::getline(status, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) allowed = line.substr(line.find_first_not_of(" \t", 18));
  }
  CHECK(allowed == std::to_string(last));
  REQUIRE(recorder.wait_exit(2));
  std::ifstream self("/proc/self/status");
  std::string self_allowed;
  while (std::getline(self, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) self_allowed = line;
  }
  CHECK(recorder.texts(2, false) == std::vector<std::string>{self_allowed});
  kill(*pid, SIGKILL);
  REQUIRE(recorder.wait_exit(1));
}

TEST_CASE("spawn: workers start with no blocked or ignored signal and no descriptor of ours") {
  // The agent blocks SIGCHLD (prepare_process); pretend it also ignores SIGUSR1 and leaks a descriptor.
  struct sigaction ignore{}, previous{};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(sigaction(SIGUSR1, &ignore, &previous) == 0);
  const int leaked = dup2(open("/dev/null", O_RDONLY), 100);  // no O_CLOEXEC
  REQUIRE(leaked == 100);
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({command(1, {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}),
                    command(2, {"ls", "/proc/self/fd"})});
  REQUIRE(recorder.wait_exit(1));
  REQUIRE(recorder.wait_exit(2));
  sigaction(SIGUSR1, &previous, nullptr);
  close(leaked);
  CHECK(recorder.texts(1, false) == std::vector<std::string>{"SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"});
  const auto fds = recorder.texts(2, false);
  CHECK(std::find(fds.begin(), fds.end(), "100") == fds.end());
  CHECK(std::find(fds.begin(), fds.end(), "1") != fds.end());
}

TEST_CASE("spawn: exits are seen even when another thread swallows SIGCHLD") {
  // A thread that breaks the prepare_process() rule: SIGCHLD unblocked with the default (discard) action, so the
  // kernel may hand the signal to it instead of the supervisor's signalfd. The per-worker pidfd still sees exits.
  std::atomic<bool> done{false};
  std::thread rogue([&] {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    pthread_sigmask(SIG_UNBLOCK, &chld, nullptr);
    while (!done) usleep(50);
  });
  EventRecorder recorder;
  {
    Supervisor supervisor(recorder.events());
    // Which thread takes each SIGCHLD is up to the scheduler; many staggered exits make a lost one near certain.
    for (std::uint64_t round = 0; round < 3; ++round) {
      std::vector<ProcessSpec> specs;
      for (std::uint64_t id = round * 20 + 1; id <= round * 20 + 20; ++id) {
        specs.push_back(command(id, {"sh", "-c", "sleep 0.0$1", "sh", std::to_string(id % 10)}));
      }
      supervisor.spawn(specs);
      for (const auto& spec : specs) {
        CAPTURE(spec.id);
        CHECK(recorder.wait_exit(spec.id, 2s));
      }
    }
  }
  done = true;
  rogue.join();
}

TEST_CASE("spawn_async: returns while the supervisor thread is busy; outcomes arrive as events") {
  EventRecorder recorder;
  Events events = recorder.events();
  // The first worker's `started` holds the supervisor thread for 1.5 s, as a starved thread would be.
  const auto record_started = events.started;
  events.started = [record_started](std::uint64_t id, pid_t pid) {
    if (id == 1) std::this_thread::sleep_for(1500ms);
    record_started(id, pid);
  };
  Supervisor supervisor(events);
  supervisor.spawn_async({command(1, {"/bin/true"})});
  const auto before = std::chrono::steady_clock::now();
  supervisor.spawn_async({command(2, {"sh", "-c", "exit 4"}), command(3, {"dtrain-no-such-program"})});
  CHECK(std::chrono::steady_clock::now() - before < 200ms);
  const auto four = recorder.wait_exit(2);
  const auto missing = recorder.wait_exit(3);
  REQUIRE(four);
  REQUIRE(missing);
  CHECK(four->exit.exit_code == 4);
  CHECK(recorder.order(2) == std::vector<std::string>{"started", "exited"});
  CHECK(missing->exit.exit_code == 127);
  CHECK(missing->exit.spawn_error.find("dtrain-no-such-program") != std::string::npos);
  CHECK(recorder.order(3) == std::vector<std::string>{"exited"});
  REQUIRE(recorder.wait_exit(1));
}

TEST_CASE("spawn: a batch whose keepers are all forked first starts every good spec and reports each failure") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec missing_dir = command(3, {"/bin/true"});
  missing_dir.working_dir = "/nonexistent-dtrain-dir";  // fails in the child, after its keeper was forked
  std::vector<ProcessSpec> specs{command(1, {"sh", "-c", "exit 3"}), command(2, {"dtrain-no-such-program"}),
                                 std::move(missing_dir)};
  for (std::uint64_t id = 4; id < 12; ++id) specs.push_back(command(id, {"sh", "-c", "exit " + std::to_string(id)}));
  supervisor.spawn(std::move(specs));
  const auto not_found = recorder.wait_exit(2);
  const auto no_dir = recorder.wait_exit(3);
  REQUIRE(not_found);
  REQUIRE(no_dir);
  CHECK(not_found->exit.spawn_error.find("dtrain-no-such-program") != std::string::npos);
  CHECK(recorder.order(2) == std::vector<std::string>{"exited"});
  CHECK(no_dir->exit.spawn_error.find("/nonexistent-dtrain-dir") != std::string::npos);
  CHECK(recorder.order(3) == std::vector<std::string>{"exited"});
  for (std::uint64_t id : {1, 4, 5, 6, 7, 8, 9, 10, 11}) {
    const auto exit = recorder.wait_exit(id);
    REQUIRE(exit);
    CHECK(exit->exit.exit_code == static_cast<int>(id == 1 ? 3 : id));
    CHECK(recorder.order(id) == std::vector<std::string>{"started", "exited"});
  }
  CHECK(supervisor.running() == 0);
}

TEST_CASE("spawn: DTRAIN_WORKER_PID is the worker's own pid as it sees it, over the spec's, and not its children's") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  // $$ is the shell's pid as the shell sees it; the inner shell is a child that inherits the variable.
  ProcessSpec spec = command(1, {"sh", "-c", "echo $$ $DTRAIN_WORKER_PID; sh -c 'echo $$ $DTRAIN_WORKER_PID'"});
  spec.env["DTRAIN_WORKER_PID"] = "1";   // a spec cannot choose it
  supervisor.spawn({spec});
  REQUIRE(recorder.wait_exit(1));
  const auto lines = recorder.texts(1, false);
  REQUIRE(lines.size() == 2);
  const auto words = [](const std::string& line) {
    const auto space = line.find(' ');
    return std::make_pair(line.substr(0, space), line.substr(space + 1));
  };
  const auto [worker_pid, worker_env] = words(lines[0]);
  const auto [child_pid, child_env] = words(lines[1]);
  CHECK(worker_env == worker_pid);
  CHECK(child_env == worker_pid);   // inherited unchanged
  CHECK(child_pid != worker_pid);   // so the child can tell it is not the worker
}
