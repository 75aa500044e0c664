// The Gloo backend between separate processes (dtrain-comm-worker, beside this binary), joined through
// make_communicator_from_env and a real store served by this process: correct results, and peers that die or
// stall make the others fail with CommError within about the timeout instead of hanging.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/store/store.h"
#include "agent/store/testing/in_process_store.h"

extern char** environ;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kProcessToken[] = "comm-process-test-token-round-0";

struct ProcessStoreServer : dtrain::store::testing::InProcessStore {
  ProcessStoreServer() : InProcessStore(kProcessToken) {}
};

std::string worker_path() {
  auto path = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "dtrain-comm-worker";
  REQUIRE_MESSAGE(std::filesystem::exists(path), "build the dtrain-comm-worker target: " << path.string());
  return path.string();
}

struct Worker {
  pid_t pid = -1;
  std::string output_path;
  std::string output_text;
  int status = 0;
  double exited_after_s = -1;

  const std::string& output() const { return output_text; }
  bool killed_by(int signal) const { return WIFSIGNALED(status) && WTERMSIG(status) == signal; }
  // The exit code, or minus the signal that killed it.
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status); }
};

// Starts `world` workers with `args`, their output (stdout and stderr) in files; waits for all of them up to
// `limit`, then kills what is left (and the check on exited_after_s fails). While waiting, calls on_poll (if any)
// with the workers and the seconds since the start, every 10 ms.
std::vector<Worker> run_workers(const ProcessStoreServer& server, int world, const std::vector<std::string>& args,
                                std::chrono::milliseconds timeout, std::chrono::seconds limit,
                                const std::function<void(std::vector<Worker>&, double)>& on_poll = {}) {
  const std::string program = worker_path();
  const auto dir = std::filesystem::temp_directory_path() / ("comm-process-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<Worker> workers(world);
  const auto start = Clock::now();
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> env_text = {
        "RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world), "DTRAIN_STORE_ADDR=" + server.address,
        "DTRAIN_JOB_TOKEN=" + std::string(kProcessToken), "MASTER_ADDR=127.0.0.1",
        "DTRAIN_COMM_TIMEOUT_MS=" + std::to_string(timeout.count())};
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string_view kv(*entry);
      bool ours = false;
      for (const char* name : {"RANK=", "WORLD_SIZE=", "DTRAIN_STORE_ADDR=", "DTRAIN_JOB_TOKEN=", "MASTER_ADDR=",
                               "DTRAIN_COMM_TIMEOUT_MS=", "GLOO_SOCKET_IFNAME=", "DTRAIN_TLS_CA="}) {
        ours = ours || kv.rfind(name, 0) == 0;
      }
      if (!ours) env_text.emplace_back(kv);
    }
    std::vector<char*> envp;
    for (auto& kv : env_text) envp.push_back(kv.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_text = {program};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& arg : argv_text) argv.push_back(arg.data());
    argv.push_back(nullptr);

    workers[rank].output_path = (dir / ("rank" + std::to_string(rank) + ".log")).string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, workers[rank].output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    REQUIRE(posix_spawn(&workers[rank].pid, program.c_str(), &actions, nullptr, argv.data(), envp.data()) == 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  int left = world;
  while (left > 0 && Clock::now() - start < limit) {
    if (on_poll) on_poll(workers, std::chrono::duration<double>(Clock::now() - start).count());
    for (auto& worker : workers) {
      if (worker.exited_after_s >= 0) continue;
      if (waitpid(worker.pid, &worker.status, WNOHANG) == worker.pid) {
        worker.exited_after_s = std::chrono::duration<double>(Clock::now() - start).count();
        --left;
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  for (auto& worker : workers) {
    if (worker.exited_after_s < 0) {
      kill(worker.pid, SIGKILL);
      waitpid(worker.pid, &worker.status, 0);
    }
    std::ifstream in(worker.output_path);
    std::stringstream text;
    text << in.rdbuf();
    worker.output_text = text.str();
  }
  std::filesystem::remove_all(dir);
  return workers;
}

// The milliseconds in a worker's "comm-error after MS ms" line, or -1.
long error_after_ms(const std::string& output) {
  auto at = output.find("comm-error after ");
  return at == std::string::npos ? -1 : std::atol(output.c_str() + at + 17);
}

}  // namespace

TEST_CASE("3 worker processes: every collective and a DDP pass give exact results") {
  ProcessStoreServer server;
  auto workers = run_workers(server, 3, {"check"}, 30s, 60s);
  for (int rank = 0; rank < 3; ++rank) {
    CAPTURE(rank);
    INFO(workers[rank].output());
    CHECK(workers[rank].exited_after_s >= 0);
    CHECK(workers[rank].exit_code() == 0);
    CHECK(workers[rank].output().find("comm-worker rank " + std::to_string(rank) + " of 3 (gloo) ok") !=
          std::string::npos);
  }
}

TEST_CASE("a killed peer makes the others' allreduce fail with CommError, not hang") {
  ProcessStoreServer server;
  const auto timeout = 2500ms;
  auto workers = run_workers(server, 3, {"die", "1"}, timeout, 30s);
  CHECK(workers[1].killed_by(SIGKILL));
  for (int rank : {0, 2}) {
    CAPTURE(rank);
    const std::string output = workers[rank].output();
    INFO(output);
    CHECK(workers[rank].exit_code() == 0);
    const long ms = error_after_ms(output);
    CHECK(ms >= 0);
    CHECK(ms < 2 * timeout.count());
    CHECK(output.find("allreduce of 1048576 floats") != std::string::npos);
    CHECK(output.find("rank " + std::to_string(rank) + " of 3") != std::string::npos);
  }
}

TEST_CASE("a peer that stops answering fails the others' allreduce after the timeout") {
  ProcessStoreServer server;
  const auto timeout = 2000ms;
  auto workers = run_workers(server, 2, {"stall", "1"}, timeout, 30s);
  const std::string output = workers[0].output();
  INFO(output);
  CHECK(workers[0].exit_code() == 0);
  const long ms = error_after_ms(output);
  CHECK(ms >= timeout.count() * 9 / 10);
  CHECK(ms < 2 * timeout.count());
  CHECK(output.find("timeout of 2.0 s") != std::string::npos);
  CHECK(workers[1].exit_code() == 0);
}

TEST_CASE("a peer killed in the middle of back-to-back allreduces fails the others within the timeout") {
  ProcessStoreServer server;
  const auto timeout = 2500ms;
  double killed_at = -1;
  const auto kill_rank0_once_looping = [&](std::vector<Worker>& workers, double now) {
    if (killed_at >= 0) return;
    for (const auto& worker : workers) {
      std::ifstream in(worker.output_path);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.find("looping") == std::string::npos) return;
    }
    std::this_thread::sleep_for(200ms);  // well inside the loop
    kill(workers[0].pid, SIGKILL);
    killed_at = now + 0.2;
  };
  auto workers = run_workers(server, 3, {"loop"}, timeout, 40s, kill_rank0_once_looping);
  REQUIRE(killed_at >= 0);
  CHECK(workers[0].killed_by(SIGKILL));
  for (int rank : {1, 2}) {
    CAPTURE(rank);
    INFO(workers[rank].output());
    CHECK(workers[rank].exit_code() == 0);
    CHECK(workers[rank].output().find("comm-error after ") != std::string::npos);
    CHECK(workers[rank].exited_after_s - killed_at < 2 * std::chrono::duration<double>(timeout).count());
  }
}
