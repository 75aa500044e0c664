#include "agent/job/job_runner.h"

#include <spdlog/spdlog.h>

#include "agent/job/node_resources.h"
#include "agent/security/x509.h"
#include "common/clock.h"
#include "common/io/text_out.h"

namespace dtrain::agent {
namespace {

// PyTorch's error files are small JSON documents; anything larger is cut to keep session messages bounded.
constexpr std::size_t kMaxErrorFileBytes = 64 * 1024;

// The error file the agent placed for the worker (never a path as the launcher sent it); a symlink the worker
// put there is reported, not followed.
std::string read_error_file(const std::string& path) {
  if (path.empty()) return {};
  const Result<std::string> text = read_placed_file(path, kMaxErrorFileBytes);
  if (!text.ok()) return "(dtrain agent: " + text.status.message() + ")";
  return text.value;
}

}  // namespace

JobRunner::JobRunner(store::Store& store, std::string advertise_host, std::string store_address, JobRunnerHooks hooks,
                     bool workers_soon)
    : store_(store),
      advertise_host_(std::move(advertise_host)),
      store_address_(std::move(store_address)),
      hooks_(std::move(hooks)) {
  supervisor::Events events;
  events.started = [this](std::uint64_t id, pid_t pid) { on_started(id, pid); };
  events.line = [this](std::uint64_t id, bool is_stderr, std::string_view line) { on_line(id, is_stderr, line); };
  events.exited = [this](const supervisor::ProcessExit& exit) { on_exited(exit); };
  events.log_failed = [this](std::uint64_t id, const std::string& text) {
    emit(LogWriteFailed{round_of(id), rank_of(id), text});
  };
  // A PID namespace where the privilege allows it, so that a node-wide SIGKILL leaves nothing of a worker's tree
  // (workers get SIGKILL when the agent is gone anyway: the namespace's end changes nothing else for them).
  supervisor::Options options;
  options.pid_namespace = true;
  options.keep_first_namespace = workers_soon;
  supervisor_ = std::make_unique<supervisor::Supervisor>(std::move(events), options);
  spdlog::info("containment of workers: {}", supervisor_->containment());
}

JobRunner::~JobRunner() {
  supervisor_.reset();
  remove_shm_segments();
  std::lock_guard lock(mutex_);
  if (!store_token_.empty()) store_.drop_namespace(store_token_);
}

void JobRunner::set_emit(Emit emit) {
  std::lock_guard lock(mutex_);
  emit_ = std::move(emit);
}

void JobRunner::set_job_files(JobFiles files) {
  std::lock_guard lock(mutex_);
  job_files_ = std::move(files);
}

void JobRunner::emit(RunnerEvent event) {
  Emit emit;
  {
    std::lock_guard lock(mutex_);
    emit = emit_;
  }
  if (emit) emit(std::move(event));
}

bool JobRunner::move(RoundEvent event) {
  const std::optional<RoundState> next = transition(state_, event);
  if (next) state_ = *next;
  return next.has_value();
}

RoundPreparation JobRunner::prepare_round(const RoundRequest& request) {
  std::lock_guard lock(mutex_);
  // The namespace is replaced whatever the state (a launcher out of step gets what it asked for); only the state
  // follows the diagram.
  move(RoundEvent::prepare);
  if (!store_token_.empty()) store_.drop_namespace(store_token_);
  store_token_ = request.store_token;
  store_.open_namespace(store_token_);
  return RoundPreparation{request.round, reserve_port(), store_address_};
}

Result<JobRunner::PlacedFiles> JobRunner::place_files(std::uint32_t round, const WorkerSpec& worker) const {
  const std::string rank = "rank " + std::to_string(worker.rank) + "'s ";
  if (job_files_.empty()) {
    return {{StatusCode::failed_precondition,
             "no job directory yet: the launcher must send Configure (its job id) first"}};
  }
  // Places `name` ("": none) into `out`; the first refusal ends the placing.
  const auto place = [&](const std::string& name, const std::string& what, std::string& out) {
    if (name.empty()) return Status{};
    Result<std::string> placed = job_files_.place(name, rank + what);
    out = std::move(placed.value);
    return placed.status;
  };
  PlacedFiles files;
  Status status = place(worker.log_path, "log_path", files.log);
  if (status.ok()) status = place(worker.error_file, "error_file", files.error);
  if (status.ok()) {
    status = place("attempt_" + std::to_string(round) + "/stacks/rank_" + std::to_string(worker.rank) + ".dump.txt",
                   "own dump file (DTRAIN_STACKS_FILE)", files.stacks);
  }
  if (!status.ok()) return {status};
  // A stale error or stacks file (a reused job id) would be taken for this worker's.
  if (!files.error.empty()) ::unlink(files.error.c_str());
  ::unlink(files.stacks.c_str());
  return {{}, std::move(files)};
}

supervisor::ProcessSpec JobRunner::process_spec(std::uint32_t round, const Worker& worker) const {
  const WorkerSpec& w = worker.spec;
  supervisor::ProcessSpec spec;
  spec.id = process_id(round, w.rank);
  spec.argv = w.argv;
  spec.env = w.env;
  for (const auto& [k, v] : hooks_.worker_env) spec.env[k] = v;
  spec.working_dir = w.working_dir;
  spec.cpus = w.cpus;
  spec.log_path = w.log_path;
  if (!w.error_file.empty()) spec.env["TORCHELASTIC_ERROR_FILE"] = w.error_file;
  spec.env["DTRAIN_REPORT_TOKEN"] = worker.report_token;
  spec.env["DTRAIN_STACKS_FILE"] = worker.stacks_file;
  // Prepended to the plan's PYTHONPATH, else to the one the worker would inherit from the agent.
  const auto planned = spec.env.find("PYTHONPATH");
  const char* inherited = std::getenv("PYTHONPATH");
  const std::string rest = planned != spec.env.end() ? planned->second : inherited ? inherited : "";
  const std::string path = worker_python_path(hooks_.python_dirs, instrument_python_, w.argv, rest);
  if (!path.empty() && path != rest) spec.env["PYTHONPATH"] = path;
  return spec;
}

Status JobRunner::start_group(const GroupSpec& group) {
  std::vector<supervisor::ProcessSpec> specs;
  bool done = false;
  {
    std::lock_guard lock(mutex_);
    if (!transition(state_, RoundEvent::start)) {
      return {StatusCode::failed_precondition, "round " + std::to_string(round_) +
                                                   " is still running on this node; stop it before starting round " +
                                                   std::to_string(group.round)};
    }
    // Every file is placed (and checked) before anything changes: a refused path starts nothing.
    std::vector<PlacedFiles> files;
    for (const auto& w : group.workers) {
      Result<PlacedFiles> placed = place_files(group.round, w);
      if (!placed.ok()) {
        return {StatusCode::invalid_argument,
                "round " + std::to_string(group.round) + " not started: " + placed.status.message()};
      }
      files.push_back(std::move(placed.value));
    }
    move(RoundEvent::start);
    round_ = group.round;
    shm_prefix_ = shm_prefix_of(group);
    round_token_ = group.round_token;
    instrument_python_ = group.instrument_python;
    workers_.clear();
    std::size_t index = 0;
    for (const auto& w : group.workers) {
      Worker& worker = workers_[w.rank] = Worker{w, false, {}, 0, {}, 0};
      PlacedFiles& placed = files[index++];
      worker.spec.log_path = std::move(placed.log);
      worker.spec.error_file = std::move(placed.error);
      worker.stacks_file = std::move(placed.stacks);
      // Ties a health report to the worker that sends it (check_reporter): fresh for every worker and round.
      worker.report_token = security::x509::random_hex(16);
      specs.push_back(process_spec(group.round, worker));
    }
    if (workers_.empty()) done = move(RoundEvent::all_exited);
  }
  if (done) {
    emit(GroupDone{group.round});
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
    move(RoundEvent::stop);
  }
  supervisor_->stop_all(grace, [this, done = std::move(done)](unsigned killed) {
    {
      std::lock_guard lock(mutex_);
      move(RoundEvent::swept);
    }
    remove_shm_segments();
    done(killed);
  });
}

void JobRunner::stop_group(std::uint32_t round, std::chrono::milliseconds grace) {
  stop(grace, [this, round](unsigned killed) { emit(GroupStopped{round, killed}); });
}

bool JobRunner::stop_and_wait(std::chrono::milliseconds grace, std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mutex_);
    move(RoundEvent::stop);
  }
  bool finished = supervisor_->stop_all_and_wait(grace, timeout);
  remove_shm_segments();
  std::lock_guard lock(mutex_);
  move(RoundEvent::swept);
  return finished;
}

void JobRunner::remove_shm_segments() const {
  std::string prefix;
  {
    std::lock_guard lock(mutex_);
    prefix = shm_prefix_;
  }
  dtrain::agent::remove_shm_segments(kShmDir, prefix);
}

RoundState JobRunner::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void JobRunner::on_started(std::uint64_t id, pid_t pid) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = workers_.find(rank_of(id)); it != workers_.end() && round_of(id) == round_) it->second.pid = pid;
  }
  emit(WorkerStarted{round_of(id), rank_of(id), pid});
}

void JobRunner::on_line(std::uint64_t id, bool is_stderr, std::string_view line) {
  const std::uint32_t round = round_of(id);
  const std::uint32_t rank = rank_of(id);
  bool wanted = false;
  bool shown = false;
  {
    std::lock_guard lock(mutex_);
    if (round != round_) return;
    auto it = workers_.find(rank);
    if (it == workers_.end()) return;
    wanted = is_stderr ? it->second.spec.stream_stderr : it->second.spec.stream_stdout;
    shown = hooks_.console && hooks_.console(rank, it->second.spec.local_rank);
  }
  if (shown) {
    // One write(2) for the whole line, as the launcher's console writes: stdout and stderr often share one file.
    std::string text = "[" + std::to_string(rank) + "] ";
    text.append(line);
    text += '\n';
    write_whole(is_stderr ? stderr : stdout, text);
  }
  if (wanted) emit(LogLine{round, rank, is_stderr, std::string(line)});
}

void JobRunner::on_exited(const supervisor::ProcessExit& exit) {
  const std::uint32_t round = round_of(exit.id);
  const std::uint32_t rank = rank_of(exit.id);
  std::string error_file;
  std::string log_path;
  bool group_done = false;
  if (hooks_.before_exit) hooks_.before_exit();
  {
    std::lock_guard lock(mutex_);
    if (round == round_) {
      auto it = workers_.find(rank);
      if (it != workers_.end()) {
        it->second.exited = true;
        error_file = it->second.spec.error_file;
        log_path = it->second.spec.log_path;
      }
      bool all = true;
      for (const auto& [r, w] : workers_) all = all && w.exited;
      group_done = all && move(RoundEvent::all_exited);
    }
  }
  if (group_done) remove_shm_segments();
  emit(WorkerExited{round, rank, exit, read_error_file(error_file), log_path, unix_ms()});
  if (group_done) emit(GroupDone{round});
}

}  // namespace dtrain::agent
