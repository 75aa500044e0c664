#include "cli/controller/local_agents.h"

#include <csignal>
#include <stdexcept>

namespace dtrain::controller {
namespace {

constexpr std::string_view kReadyPrefix = "dtrain-agent listening on ";

std::string describe(const supervisor::ProcessExit& exit) {
  if (!exit.spawn_error.empty()) return exit.spawn_error;
  if (exit.signal != 0) return "killed by signal " + std::to_string(exit.signal);
  return "exited with code " + std::to_string(exit.exit_code);
}

}  // namespace

LocalAgents::LocalAgents(EventQueue& events, std::string self_exe, std::string log_dir)
    : events_(events),
      self_exe_(std::move(self_exe)),
      log_dir_(std::move(log_dir)),
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
          }}) {}

LocalAgents::~LocalAgents() { wait_exit(std::chrono::milliseconds(0)); }

std::vector<std::string> LocalAgents::start(int count, std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mutex_);
    addresses_.assign(static_cast<std::size_t>(count), "");
    exits_.assign(static_cast<std::size_t>(count), "");
    running_ = count;
  }
  std::vector<supervisor::ProcessSpec> specs;
  for (int i = 0; i < count; ++i) {
    supervisor::ProcessSpec spec;
    spec.id = static_cast<std::uint64_t>(i);
    spec.argv = {self_exe_, "agent", "--listen", "127.0.0.1:0", "--one-shot", "--quiet"};
    spec.log_path = log_dir_ + "/agent_" + std::to_string(i) + ".log";
    spec.parent_death_signal = SIGTERM;
    specs.push_back(std::move(spec));
  }
  supervisor_.spawn(std::move(specs));

  std::unique_lock lock(mutex_);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto ready = [this] {
    for (std::size_t i = 0; i < addresses_.size(); ++i) {
      if (addresses_[i].empty() && exits_[i].empty()) return false;
    }
    return true;
  };
  bool all = cv_.wait_until(lock, deadline, ready);
  for (std::size_t i = 0; i < addresses_.size(); ++i) {
    if (!addresses_[i].empty()) continue;
    std::string why = !exits_[i].empty() ? exits_[i] : "did not report its address within " +
                                                          std::to_string(timeout.count()) + " ms";
    throw std::runtime_error("local agent for node " + std::to_string(i) + " failed to start: " + why +
                             " (its output is in " + log_dir_ + "/agent_" + std::to_string(i) + ".log)");
  }
  (void)all;
  return addresses_;
}

bool LocalAgents::wait_exit(std::chrono::milliseconds timeout) {
  bool by_themselves;
  {
    std::unique_lock lock(mutex_);
    by_themselves = cv_.wait_for(lock, timeout, [this] { return running_ <= 0; });
  }
  // Whatever is left (a stuck agent, or workers an agent left behind and that were reparented to this subreaper)
  // is stopped and reaped.
  supervisor_.stop_all_and_wait(std::chrono::milliseconds(by_themselves ? 0 : 1000), std::chrono::seconds(10));
  return by_themselves;
}

}  // namespace dtrain::controller
