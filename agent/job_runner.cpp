#include "agent/job_runner.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "agent/security/x509.h"
#include "common/util.h"

namespace dtrain::agent {
namespace {

// PyTorch's error files are small JSON documents; anything larger is cut to keep session messages bounded.
constexpr std::size_t kMaxErrorFileBytes = 64 * 1024;

// The error file the agent placed for the worker (never a path as the launcher sent it); a symlink the worker
// put there is reported, not followed.
std::string read_error_file(const std::string& path) {
  if (path.empty()) return {};
  try {
    return read_placed_file(path, kMaxErrorFileBytes);
  } catch (const PathError& e) {
    return std::string("(dtrain agent: ") + e.what() + ")";
  }
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
  events.log_failed = [this](std::uint64_t id, const std::string& text) {
    v1::AgentMessage message;
    auto* failed = message.mutable_log_write_failed();
    failed->set_round(round_of(id));
    failed->set_rank(rank_of(id));
    failed->set_message(text);
    emit(std::move(message));
  };
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

void JobRunner::set_job_files(JobFiles files) {
  std::lock_guard lock(mutex_);
  job_files_ = std::move(files);
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

std::pair<std::string, std::string> JobRunner::place_files(const v1::WorkerSpec& worker) const {
  const std::string rank = "rank " + std::to_string(worker.rank()) + "'s ";
  if (job_files_.empty()) throw PathError("no job directory yet: the launcher must send Configure (its job id) first");
  std::string log = worker.log_path().empty() ? "" : job_files_.place(worker.log_path(), rank + "log_path");
  std::string error = worker.error_file().empty() ? "" : job_files_.place(worker.error_file(), rank + "error_file");
  // A stale error file (a reused job id) would be taken for this worker's.
  if (!error.empty()) ::unlink(error.c_str());
  return {std::move(log), std::move(error)};
}

std::string JobRunner::start_group(const v1::StartGroup& request) {
  std::vector<supervisor::ProcessSpec> specs;
  {
    std::lock_guard lock(mutex_);
    if (group_active_) {
      return "round " + std::to_string(round_) + " is still running on this node; stop it before starting round " +
             std::to_string(request.round());
    }
    // Every file is placed (and checked) before anything changes: a refused path starts nothing.
    std::vector<std::pair<std::string, std::string>> files;   // log, error file of each worker
    try {
      for (const auto& w : request.workers()) files.push_back(place_files(w));
    } catch (const PathError& e) {
      return "round " + std::to_string(request.round()) + " not started: " + e.what();
    }
    round_ = request.round();
    round_token_ = request.round_token();
    group_active_ = true;
    stopping_ = false;
    workers_.clear();
    std::size_t index = 0;
    for (const auto& w : request.workers()) {
      const auto& [log_path, error_file] = files[index++];
      workers_[w.rank()] = Worker{w, false, {}};
      workers_[w.rank()].spec.set_error_file(error_file);
      workers_[w.rank()].spec.set_log_path(log_path);
      supervisor::ProcessSpec spec;
      spec.id = process_id(request.round(), w.rank());
      spec.argv.assign(w.argv().begin(), w.argv().end());
      spec.env.insert(w.env().begin(), w.env().end());
      for (const auto& [k, v] : worker_env_) spec.env[k] = v;
      spec.working_dir = w.working_dir();
      spec.cpus.assign(w.cpus().begin(), w.cpus().end());
      spec.log_path = log_path;
      if (!error_file.empty()) spec.env["TORCHELASTIC_ERROR_FILE"] = error_file;
      // Ties a health report to the worker that sends it (check_reporter): fresh for every worker and round.
      workers_[w.rank()].report_token = security::x509::random_hex(16);
      spec.env["DTRAIN_REPORT_TOKEN"] = workers_[w.rank()].report_token;
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

std::string JobRunner::check_reporter(std::uint32_t rank, const std::string& report_token) const {
  std::lock_guard lock(mutex_);
  auto it = workers_.find(rank);
  if (it == workers_.end()) return "rank " + std::to_string(rank) + " is not a worker of this node in this round";
  if (!security::x509::constant_time_equal(report_token, it->second.report_token)) {
    return "the dtrain-report-token metadata is not rank " + std::to_string(rank) +
           "'s DTRAIN_REPORT_TOKEN: a worker reports only as itself (its RANK, with its own DTRAIN_REPORT_TOKEN)";
  }
  return {};
}

std::string JobRunner::current_token() const {
  std::lock_guard lock(mutex_);
  return round_token_;
}

void JobRunner::on_started(std::uint64_t id, pid_t pid) {
  v1::AgentMessage message;
  auto* started = message.mutable_worker_started();
  started->set_round(round_of(id));
  started->set_rank(rank_of(id));
  started->set_pid(static_cast<std::uint32_t>(pid));
  emit(std::move(message));
}

void JobRunner::on_line(std::uint64_t id, bool is_stderr, std::string_view line) {
  const std::uint32_t round = round_of(id);
  const std::uint32_t rank = rank_of(id);
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
  const std::uint32_t round = round_of(exit.id);
  const std::uint32_t rank = rank_of(exit.id);
  std::string error_file;
  std::string log_path;
  bool group_done = false;
  {
    std::lock_guard lock(mutex_);
    if (round == round_) {
      auto it = workers_.find(rank);
      if (it != workers_.end()) {
        it->second.exited = true;
        error_file = it->second.spec.error_file();
        log_path = it->second.spec.log_path();
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
  exited->set_log_path(log_path);
  exited->set_exit_unix_ms(unix_ms());
  exited->set_spawn_error(exit.spawn_error);
  exited->set_log_error(exit.log_error);
  exited->set_log_bytes_lost(exit.log_bytes_lost);
  emit(std::move(message));
  if (group_done) {
    v1::AgentMessage done;
    done.mutable_group_done()->set_round(round);
    emit(std::move(done));
  }
}

}  // namespace dtrain::agent
