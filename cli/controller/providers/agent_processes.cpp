#include "cli/controller/providers/agent_processes.h"

#include <unistd.h>

#include <csignal>
#include <stdexcept>

namespace dtrain::controller {
namespace {

constexpr std::string_view kReadyPrefix = "dtrain-agent listening on ";

// How the process ended, with the end of its stderr (ssh and srun say there why they could not start an agent).
std::string describe(const supervisor::ProcessExit& exit) {
  if (!exit.spawn_error.empty()) return exit.spawn_error;
  std::string text = exit.signal != 0 ? "was killed by signal " + std::to_string(exit.signal)
                                      : "exited with code " + std::to_string(exit.exit_code);
  const auto& tail = exit.stderr_tail;
  const std::size_t first = tail.size() > 3 ? tail.size() - 3 : 0;
  for (std::size_t i = first; i < tail.size(); ++i) {
    std::string line = tail[i];
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();  // ssh ends lines in \r\n
    text += (i == first ? ": " : " / ") + line;
  }
  return text;
}

}  // namespace

AgentProcesses::AgentProcesses(EventQueue& events, std::string log_dir, std::chrono::milliseconds stop_grace)
    : events_(events),
      log_dir_(std::move(log_dir)),
      // The agent's own stop (SIGTERM, grace, SIGKILL, reap) plus time to exit.
      orphan_grace_(stop_grace + std::chrono::seconds(5)),
      supervisor_(supervisor::Events{
          [](std::uint64_t, pid_t) {},
          [this](std::uint64_t id, bool is_stderr, std::string_view line) {
            if (!is_stderr && line.substr(0, kReadyPrefix.size()) == kReadyPrefix) {
              std::lock_guard lock(mutex_);
              if (id < addresses_.size()) addresses_[id] = std::string(line.substr(kReadyPrefix.size()));
              cv_.notify_all();
              return;
            }
            Event event;
            event.kind = Event::Kind::agent_line;
            event.node = static_cast<int>(id);
            event.text = std::string(line);
            event.is_stderr = is_stderr;
            events_.push(std::move(event));
          },
          [this](const supervisor::ProcessExit& exit) {
            {
              std::lock_guard lock(mutex_);
              if (exit.id < exits_.size()) exits_[exit.id] = describe(exit);
              --running_;
              cv_.notify_all();
            }
            Event event;
            event.kind = Event::Kind::agent_exited;
            event.node = static_cast<int>(exit.id);
            event.text = describe(exit);
            events_.push(std::move(event));
          },
          [this](std::uint64_t id, const std::string& message) {
            // The agent's own log (agent_<slot>.log) is full: say so where its lines go.
            Event event;
            event.kind = Event::Kind::agent_line;
            event.node = static_cast<int>(id);
            event.text = message + "; later lines of this agent are not written there";
            event.is_stderr = true;
            events_.push(std::move(event));
          }}) {}

AgentProcesses::~AgentProcesses() { wait_exit(std::chrono::milliseconds(0)); }

std::string AgentProcesses::session_socket(int slot) {
  if (!socket_dir_) {
    // The agents' own mechanism (agent/supervisor/runtime_dir.h): a private directory held with an flock, and the
    // sweep that removes those of launchers and agents that were SIGKILLed. A Unix socket's path is at most 107
    // bytes: a long XDG_RUNTIME_DIR or TMPDIR falls back to /tmp.
    std::string base = supervisor::RuntimeDir::default_base();
    if (base.size() > 60) base = "/tmp/dtrain-" + std::to_string(::geteuid());
    socket_dir_ = supervisor::RuntimeDir::create(base);
  }
  return socket_dir_->path() + "/agent_" + std::to_string(slot) + ".sock";
}

void AgentProcesses::start(std::vector<std::vector<std::string>> argvs) {
  {
    std::lock_guard lock(mutex_);
    addresses_.assign(argvs.size(), "");
    exits_.assign(argvs.size(), "");
    running_ = static_cast<int>(argvs.size());
  }
  std::vector<supervisor::ProcessSpec> specs;
  for (std::size_t i = 0; i < argvs.size(); ++i) {
    supervisor::ProcessSpec spec;
    spec.id = i;
    spec.argv = std::move(argvs[i]);
    spec.log_path = log_path(static_cast<int>(i));
    spec.parent_death_signal = SIGTERM;
    spec.orphan_grace = orphan_grace_;
    specs.push_back(std::move(spec));
  }
  supervisor_.spawn(std::move(specs));
}

std::vector<std::string> AgentProcesses::wait_addresses(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  auto ready = [this] {
    for (std::size_t i = 0; i < addresses_.size(); ++i) {
      if (addresses_[i].empty() && exits_[i].empty()) return false;
    }
    return true;
  };
  cv_.wait_until(lock, std::chrono::steady_clock::now() + timeout, ready);
  for (std::size_t i = 0; i < addresses_.size(); ++i) {
    if (!addresses_[i].empty()) continue;
    std::string why = !exits_[i].empty() ? exits_[i] : "did not report its address within " +
                                                          std::to_string(timeout.count()) + " ms";
    throw std::runtime_error("local agent for node " + std::to_string(i) + " failed to start: " + why +
                             " (its output is in " + log_path(static_cast<int>(i)) + ")");
  }
  return addresses_;
}

bool AgentProcesses::exited(int slot) {
  std::lock_guard lock(mutex_);
  return slot >= 0 && static_cast<std::size_t>(slot) < exits_.size() && !exits_[static_cast<std::size_t>(slot)].empty();
}

bool AgentProcesses::wait_exit(std::chrono::milliseconds timeout, std::chrono::milliseconds kill_grace) {
  bool by_themselves;
  {
    std::unique_lock lock(mutex_);
    by_themselves = cv_.wait_for(lock, timeout, [this] { return running_ <= 0; });
  }
  // Whatever is left (a stuck agent or ssh client, or workers an agent left behind and that were reparented to this
  // subreaper) is stopped and reaped.
  supervisor_.stop_all_and_wait(by_themselves ? std::chrono::milliseconds(0) : kill_grace, std::chrono::seconds(10));
  return by_themselves;
}

}  // namespace dtrain::controller
