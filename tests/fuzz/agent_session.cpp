// Fuzz target: the agent's handling of a launcher session (Agent::serve_session, which drives JobRunner). The input
// is a sequence of records [kind: 1 byte, ignored][length: u16 LE][LauncherMessage]; each record that parses is
// one message of the session, in order, and the session ends after the last. The agent is real and runs for the
// whole fuzzing run (store, gRPC server on 127.0.0.1, supervisor), with its run directory in a temporary directory.
//
// The agent does what a launcher tells it, so the messages are made harmless on their way in, and nothing else
// is changed: every worker's argv becomes a program that does not exist (spawning fails at exec, which the agent
// reports like any spawn error), Probe reaches only 127.0.0.1 and skips the node checks (they read the machine,
// not the message), and waits (grace, reach timeout) are capped so that an input takes milliseconds. Paths the
// launcher names are checked here before the agent sees them: a log or error file that JobFiles would place
// outside the run directory is a crash, found before the agent writes or unlinks it.

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "agent/job/run_dir.h"
#include "agent/session/session_stream.h"
#include "agent/supervisor/supervisor.h"

namespace {

using dtrain::v1::LauncherMessage;

constexpr std::uint32_t kMaxWaitMs = 50;

struct Fixture {
  std::string run_dir;
  dtrain::agent::Agent* agent = nullptr;
  std::thread thread;
  std::optional<dtrain::agent::JobFiles> files;  // what the agent's last accepted Configure chose
};

Fixture* fixture = nullptr;

// Starts the agent as `dtrain agent --listen 127.0.0.1:0 --insecure` would, and returns once it listens (it prints
// "dtrain-agent listening on HOST:PORT" only after its JobRunner exists).
void start_agent() {
  fixture = new Fixture();
  char pattern[] = "/tmp/dtrain-fuzz-agent-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) std::abort();
  fixture->run_dir = pattern;
  dtrain::agent::AgentOptions options;
  options.listen = "127.0.0.1:0";
  options.insecure = true;
  options.run_dir = fixture->run_dir;
  fixture->agent = new dtrain::agent::Agent(options);
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) std::abort();
  std::fflush(stdout);
  const int saved_stdout = ::dup(STDOUT_FILENO);
  ::dup2(pipe_fds[1], STDOUT_FILENO);
  fixture->thread = std::thread([] { fixture->agent->run(); });
  std::string line;
  for (char c; line.find('\n') == std::string::npos && ::read(pipe_fds[0], &c, 1) == 1;) line += c;
  std::fflush(stdout);
  ::dup2(saved_stdout, STDOUT_FILENO);
  ::close(saved_stdout);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  if (line.find("dtrain-agent listening on") == std::string::npos) std::abort();
  std::atexit([] {
    fixture->agent->terminate(SIGTERM);
    fixture->thread.join();
    std::filesystem::remove_all(fixture->run_dir);
  });
}

bool inside(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

// The message as the agent will see it (see the top of this file).
void make_harmless(LauncherMessage& message) {
  switch (message.body_case()) {
    case LauncherMessage::kConfigure: {
      auto* c = message.mutable_configure();
      c->set_stop_grace_ms(std::min(c->stop_grace_ms(), kMaxWaitMs));
      // One the agent refuses too leaves its previous job directory in place.
      auto files = dtrain::agent::JobFiles::for_job(fixture->run_dir, c->job_id());
      if (files.ok()) fixture->files = std::move(files.value);
      break;
    }
    case LauncherMessage::kStartGroup:
      for (auto& worker : *message.mutable_start_group()->mutable_workers()) {
        worker.clear_argv();
        worker.add_argv("/nonexistent/dtrain-fuzz-worker");
        if (!fixture->files) continue;
        for (const std::string* name : {&worker.log_path(), &worker.error_file()}) {
          if (name->empty()) continue;
          const auto placed = fixture->files->place(*name, "fuzz");
          if (placed.ok() && !inside(placed.value, fixture->run_dir)) __builtin_trap();
        }
      }
      break;
    case LauncherMessage::kStopGroup:
      message.mutable_stop_group()->set_grace_ms(std::min(message.stop_group().grace_ms(), kMaxWaitMs));
      break;
    case LauncherMessage::kProbe: {
      auto* probe = message.mutable_probe();
      probe->set_node_checks(false);
      probe->set_reach_timeout_ms(std::clamp<std::uint32_t>(probe->reach_timeout_ms(), 1, kMaxWaitMs));
      for (auto& address : *probe->mutable_reach()) {
        if (address.rfind("127.0.0.1:", 0) != 0) address = "127.0.0.1:9";
      }
      break;
    }
    default:
      break;
  }
}

// The launcher's end of the session, played from the input.
class ScriptedSession final : public dtrain::agent::SessionStream {
 public:
  explicit ScriptedSession(std::deque<LauncherMessage> messages) : messages_(std::move(messages)) {}

  bool read(LauncherMessage& message) override {
    std::lock_guard lock(mutex_);
    if (cancelled_ || messages_.empty()) return false;
    message = std::move(messages_.front());
    messages_.pop_front();
    return true;
  }
  bool write(const dtrain::v1::AgentMessage&) override { return true; }
  void cancel() override {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
  }
  std::string peer() const override { return "fuzz"; }

 private:
  std::mutex mutex_;
  std::deque<LauncherMessage> messages_;
  bool cancelled_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // As `dtrain` does first in main(): libFuzzer has started no thread of its own yet.
  dtrain::supervisor::prepare_process();
  spdlog::set_level(spdlog::level::off);
  start_agent();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::deque<LauncherMessage> messages;
  while (size >= 3 && messages.size() < 64) {
    const std::size_t length = std::min<std::size_t>(data[1] | (data[2] << 8), size - 3);
    LauncherMessage message;
    if (message.ParseFromArray(data + 3, static_cast<int>(length))) {
      make_harmless(message);
      messages.push_back(std::move(message));
    }
    data += 3 + length;
    size -= 3 + length;
  }
  ScriptedSession session(std::move(messages));
  (void)fixture->agent->serve_session(session);
  return 0;
}
