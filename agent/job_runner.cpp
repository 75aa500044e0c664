#include "agent/job_runner.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/util.h"

namespace dtrain::agent {
namespace {

// PyTorch's error files are small JSON documents; anything larger is cut to keep session messages bounded.
constexpr std::size_t kMaxErrorFileBytes = 64 * 1024;

std::string read_error_file(const std::string& path) {
  if (path.empty()) return {};
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string text(kMaxErrorFileBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

}  // namespace

unsigned reserve_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  unsigned port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

JobRunner::JobRunner(store::Store& store, std::string advertise_host, std::string store_address)
    : store_(store), advertise_host_(std::move(advertise_host)), store_address_(std::move(store_address)) {
  supervisor::Events events;
  events.started = [this](std::uint64_t id, pid_t pid) { on_started(id, pid); };
  events.line = [this](std::uint64_t id, bool is_stderr, std::string_view line) { on_line(id, is_stderr, line); };
  events.exited = [this](const supervisor::ProcessExit& exit) { on_exited(exit); };
  supervisor_ = std::make_unique<supervisor::Supervisor>(std::move(events));
}

JobRunner::~JobRunner() {
  supervisor_.reset();
  std::lock_guard lock(mutex_);
  if (!store_token_.empty()) store_.drop_namespace(store_token_);
}

void JobRunner::set_worker_env(std::map<std::string, std::string> env) {
  std::lock_guard lock(mutex_);
  worker_env_ = std::move(env);
}

void JobRunner::set_emit(Emit emit) {
  std::lock_guard lock(mutex_);
  emit_ = std::move(emit);
}

void JobRunner::emit(v1::AgentMessage message) {
  Emit emit;
  {
    std::lock_guard lock(mutex_);
    emit = emit_;
  }
  if (emit) emit(std::move(message));
}

v1::RoundPrepared JobRunner::prepare_round(const v1::PrepareRound& request) {
  std::lock_guard lock(mutex_);
  if (!store_token_.empty()) store_.drop_namespace(store_token_);
  store_token_ = request.store_token();
  store_.open_namespace(store_token_);
  v1::RoundPrepared prepared;
  prepared.set_round(request.round());
  prepared.set_master_port(reserve_port());
  prepared.set_store_address(store_address_);
  return prepared;
}

std::string JobRunner::start_group(const v1::StartGroup& request) {
  std::vector<supervisor::ProcessSpec> specs;
  {
    std::lock_guard lock(mutex_);
    if (group_active_) {
      return "round " + std::to_string(round_) + " is still running on this node; stop it before starting round " +
             std::to_string(request.round());
    }
    round_ = request.round();
    round_token_ = request.round_token();
    group_active_ = true;
    stopping_ = false;
    workers_.clear();
    for (const auto& w : request.workers()) {
      workers_[w.rank()] = Worker{w, false};
      supervisor::ProcessSpec spec;
      spec.id = process_id(request.round(), w.rank());
      spec.argv.assign(w.argv().begin(), w.argv().end());
      spec.env.insert(w.env().begin(), w.env().end());
      for (const auto& [k, v] : worker_env_) spec.env[k] = v;
      spec.working_dir = w.working_dir();
      spec.cpus.assign(w.cpus().begin(), w.cpus().end());
      spec.log_path = w.log_path();
      specs.push_back(std::move(spec));
    }
    if (workers_.empty()) group_active_ = false;
  }
  if (specs.empty()) {
    v1::AgentMessage done;
    done.mutable_group_done()->set_round(request.round());
    emit(std::move(done));
    return {};
  }
  // Asynchronous: on a loaded machine the supervisor thread may get to the specs late, and the session must keep
  // answering meanwhile. Every outcome comes back as an event (WorkerStarted, or WorkerExited with spawn_error).
  supervisor_->spawn_async(std::move(specs));
  return {};
}

void JobRunner::stop(std::chrono::milliseconds grace, std::function<void(unsigned killed)> done) {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  supervisor_->stop_all(grace, [this, done = std::move(done)](unsigned killed) {
    {
      std::lock_guard lock(mutex_);
      group_active_ = false;
    }
    done(killed);
  });
}

void JobRunner::stop_group(std::uint32_t round, std::chrono::milliseconds grace) {
  stop(grace, [this, round](unsigned killed) {
    v1::AgentMessage message;
    message.mutable_group_stopped()->set_round(round);
    message.mutable_group_stopped()->set_killed(killed);
    emit(std::move(message));
  });
}

bool JobRunner::stop_and_wait(std::chrono::milliseconds grace, std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  bool finished = supervisor_->stop_all_and_wait(grace, timeout);
  std::lock_guard lock(mutex_);
  group_active_ = false;
  return finished;
}

bool JobRunner::running() const {
  std::lock_guard lock(mutex_);
  return group_active_;
}

bool JobRunner::has_worker(std::uint32_t rank) const {
  std::lock_guard lock(mutex_);
  return workers_.count(rank) != 0;
}

std::string JobRunner::current_token() const {
  std::lock_guard lock(mutex_);
  return round_token_;
}

void JobRunner::on_started(std::uint64_t id, pid_t pid) {
  v1::AgentMessage message;
  auto* started = message.mutable_worker_started();
  started->set_round(static_cast<std::uint32_t>(id >> 32));
  started->set_rank(static_cast<std::uint32_t>(id & 0xffffffffu));
  started->set_pid(static_cast<std::uint32_t>(pid));
  emit(std::move(message));
}

void JobRunner::on_line(std::uint64_t id, bool is_stderr, std::string_view line) {
  auto round = static_cast<std::uint32_t>(id >> 32);
  auto rank = static_cast<std::uint32_t>(id & 0xffffffffu);
  {
    std::lock_guard lock(mutex_);
    if (round != round_) return;
    auto it = workers_.find(rank);
    if (it == workers_.end()) return;
    bool wanted = is_stderr ? it->second.spec.stream_stderr() : it->second.spec.stream_stdout();
    if (!wanted) return;
  }
  v1::AgentMessage message;
  auto* lines = message.mutable_log_lines();
  lines->set_round(round);
  auto* entry = lines->add_lines();
  entry->set_rank(rank);
  entry->set_is_stderr(is_stderr);
  entry->set_text(std::string(line));
  emit(std::move(message));
}

void JobRunner::on_exited(const supervisor::ProcessExit& exit) {
  auto round = static_cast<std::uint32_t>(exit.id >> 32);
  auto rank = static_cast<std::uint32_t>(exit.id & 0xffffffffu);
  std::string error_file;
  bool group_done = false;
  {
    std::lock_guard lock(mutex_);
    if (round == round_) {
      auto it = workers_.find(rank);
      if (it != workers_.end()) {
        it->second.exited = true;
        error_file = it->second.spec.error_file();
      }
      bool all = true;
      for (const auto& [r, w] : workers_) all = all && w.exited;
      if (all && group_active_ && !stopping_) {
        group_active_ = false;
        group_done = true;
      }
    }
  }
  v1::AgentMessage message;
  auto* exited = message.mutable_worker_exited();
  exited->set_round(round);
  exited->set_rank(rank);
  exited->set_pid(static_cast<std::uint32_t>(exit.pid));
  exited->set_exit_code(exit.exit_code);
  exited->set_signal(exit.signal);
  exited->set_stopped_by_agent(exit.stopped);
  exited->set_runtime_ms(static_cast<std::uint64_t>(exit.runtime.count()));
  for (const auto& line : exit.stderr_tail) exited->add_stderr_tail(line);
  exited->set_error_file_json(read_error_file(error_file));
  exited->set_exit_unix_ms(unix_ms());
  exited->set_spawn_error(exit.spawn_error);
  emit(std::move(message));
  if (group_done) {
    v1::AgentMessage done;
    done.mutable_group_done()->set_round(round);
    emit(std::move(done));
  }
}

}  // namespace dtrain::agent
