#include "cli/controller/controller.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "common/clock.h"
#include "common/os/syscalls.h"

namespace dtrain::controller {
namespace {

using Clock = std::chrono::steady_clock;

std::string signal_text(int signal) {
  const char* name = signal_name(signal);
  return name ? name : "signal " + std::to_string(signal);
}

}  // namespace

Controller::Controller(spec::Spec spec, ControllerOptions options)
    : spec_(std::move(spec)),
      options_(std::move(options)),
      policy_(spec_.restart.max_restarts, spec::duration_ms(spec_.restart.backoff_s)),
      console_(stdout, stderr),
      interrupts_(spec::duration_ms(spec_.stop.grace_s), options_.timeouts.exit_margin) {}

Controller::~Controller() = default;

void Controller::make_fleet(bool probing) {
  FleetOptions options;
  options.self_exe = options_.self_exe;
  options.insecure = options_.insecure;
  options.secret_dir = options_.secret_dir;
  options.probing = probing;
  options.timeouts = options_.timeouts;
  fleet_ = std::make_unique<Fleet>(spec_, std::move(options), events_, console_, interrupts_, *this);
  fleet_->set_job(job_id_, job_dir_);
}

void Controller::on_signal(int signal) {
  // The user is waiting: whatever the agents do, the launcher exits within stop.grace_s + exit_margin of the first
  // signal (a second one cuts that to a moment). Agents that do not confirm in time stop their workers on their
  // own when the session ends, and local agents are killed with their workers.
  if (interrupts_.on_signal(signal, Clock::now())) {
    console_.note("received " + signal_text(signal) + ": stopping every worker (send it again to kill them at once)");
  }
}

void Controller::on_report(int node, const AgentReport& report) {
  if (const auto* lines = std::get_if<LogLines>(&report)) {
    console_.worker_lines(*lines);
    return;
  }
  if (const auto* exit = std::get_if<WorkerExit>(&report); exit && !exit->log_error.empty()) {
    incomplete_logs_["attempt " + std::to_string(exit->round) + " rank " + std::to_string(exit->rank)] =
        exit->log_error + " (" + std::to_string(exit->log_bytes_lost) + " bytes of output not written)";
  }
  if (const auto* failed = std::get_if<LogWriteFailed>(&report)) {
    const std::string key = "attempt " + std::to_string(failed->round) + " rank " + std::to_string(failed->rank);
    incomplete_logs_.emplace(key, failed->message);
    console_.note("warning: " + key + ": " + failed->message +
                  "; the worker keeps running, but its log file misses everything from here on");
    return;
  }
  if (probe_) probe_->on_report(node, report);
  if (round_) {
    round_->on_report(node, report);
    monitor_.on_report(*round_, node, report);
  }
}

void Controller::on_node_lost(int node, const std::string& text) {
  if (round_) round_->on_node_lost(node, text);
  monitor_.node_lost(round_.get(), node, text);
}

std::string Controller::make_job_dir() {
  namespace fs = std::filesystem;
  fs::path base = fs::absolute(spec_.logs.dir);
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) {
    throw std::runtime_error("cannot create the log directory " + base.string() + " (logs.dir): " + ec.message() +
                             ". Point logs.dir at a directory you can write, e.g. --set logs.dir=runs");
  }
  std::string stamp = timestamp_now();
  std::string id = spec_.name + "-" + stamp;
  for (int n = 2;; ++n) {
    fs::path dir = base / id;
    if (::mkdir(dir.c_str(), 0755) == 0) {
      job_id_ = id;
      return dir.string();
    }
    if (errno != EEXIST) {
      throw std::runtime_error("cannot create the job's log directory " + dir.string() + ": " + std::strerror(errno) +
                               ". Point logs.dir at a directory you can write, e.g. --set logs.dir=runs");
    }
    id = spec_.name + "-" + stamp + "-" + std::to_string(n);
  }
}

void Controller::report_incomplete_logs() {
  if (incomplete_logs_.empty()) return;
  std::string text = "warning: " + std::to_string(incomplete_logs_.size()) + " log file" +
                     (incomplete_logs_.size() == 1 ? " is" : "s are") + " incomplete:";
  constexpr std::size_t kShown = 8;
  std::size_t shown = 0;
  for (const auto& [who, why] : incomplete_logs_) {
    if (shown++ == kShown) {
      text += "\n  and " + std::to_string(incomplete_logs_.size() - kShown) + " more";
      break;
    }
    text += "\n  " + who + ": " + why;
  }
  console_.note(text);
}

std::optional<int> Controller::after_failure(const Round& round, int restarts) {
  const auto& root = round.root_cause();
  const std::string what = root ? rank_name_of(*root) + " " + describe_failure(*root)
                                : round.node_failure().value_or("a node failed");
  if (!policy_.may_restart(restarts)) {
    if (root) {
      console_.note(failure_summary(job_id_, *root, round.other_failures(), restarts, policy_.max_restarts()));
      return exit_code_of(*root);
    }
    console_.note("job " + job_id_ + " failed: " + what +
                  (policy_.max_restarts() > 0 ? " (no restarts left)" : " (restart.max_restarts is 0)"));
    return 1;
  }
  // A lost node never returns under the same id; the next round runs on the nodes left (and on agents that
  // joined meanwhile), if nodes.count's minimum allows.
  console_.note("attempt " + std::to_string(restarts) + " failed: " + what + "; restarting (restart " +
                std::to_string(restarts + 1) + " of " + std::to_string(policy_.max_restarts()) + ") in " +
                std::to_string(policy_.backoff().count()) + " ms");
  const auto until = Clock::now() + policy_.backoff();
  fleet_->pump_until([this] { return interrupts_.interrupted(); }, until);
  return std::nullopt;
}

int Controller::run_rounds(Clock::time_point started) {
  for (int restarts = 0; !interrupts_.interrupted(); ++restarts) {
    Result<std::vector<int>> nodes = fleet_->select(restarts == 0);
    if (!nodes.ok()) {
      if (interrupts_.interrupted()) return 0;
      console_.note("job " + job_id_ + " failed: " + nodes.status.message());
      return 1;
    }
    RoundSetup setup{&spec_, &options_.timeouts, job_id_, job_dir_, static_cast<std::uint32_t>(restarts),
                     std::move(nodes.value)};
    round_ = std::make_unique<Round>(std::move(setup), *fleet_, interrupts_, console_);
    monitor_.round_started(round_->number(), round_->nodes().size());
    const Round::Outcome outcome = round_->run();
    monitor_.round_ended(*round_, outcome);
    if (outcome == Round::Outcome::success) {
      const auto seconds = std::chrono::duration<double>(Clock::now() - started).count();
      console_.note("job " + job_id_ + " finished: " + std::to_string(round_->ranks()) + " ranks exited 0 in " +
                    std::to_string(seconds).substr(0, 5) + " s");
      return 0;
    }
    if (outcome == Round::Outcome::interrupted) return 0;
    if (auto code = after_failure(*round_, restarts)) return *code;
  }
  return 0;
}

int Controller::run() {
  namespace fs = std::filesystem;
  spec_.working_dir = fs::absolute(spec_.working_dir).lexically_normal().string();
  try {
    job_dir_ = make_job_dir();
  } catch (const std::exception& e) {
    // Nothing has started yet: an unusable logs.dir is a bad spec (exit 2), not a failed job.
    console_.note(e.what());
    return 2;
  }
  const auto started = Clock::now();
  monitor_.job_started(job_id_, job_dir_, spec_);
  make_fleet(false);
  int code = 0;
  try {
    fleet_->start();
    code = run_rounds(started);
  } catch (const spec::PlanError& e) {
    console_.note(std::string("cannot plan the job: ") + e.what());
    code = 2;
  } catch (const std::exception& e) {
    console_.note(e.what());
    code = 1;
  }
  if (interrupts_.interrupted()) {
    console_.note("interrupted by " + signal_text(interrupts_.first_signal()) + "; every worker was stopped");
    code = 128 + interrupts_.first_signal();
  }
  // The job's outcome is known: its record ends here, and its report page is written while the agents stop.
  const std::vector<Diagnosis> diagnoses = monitor_.job_ended(code);
  fleet_->shutdown(code);
  report_incomplete_logs();
  monitor_.report_written();
  for (const auto& d : diagnoses) {
    console_.note("diagnosis (" + std::string(to_string(d.kind)) + "): " + d.message + "\n  fix: " + d.fix);
  }
  return code;
}

std::vector<ProbedNode> Controller::probe(const std::string& checkpoint_dir, std::chrono::milliseconds timeout) {
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / "dtrain-doctor-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory: " + std::string(std::strerror(errno)));
  }
  job_dir_ = dir;
  job_id_ = spec_.name + "-doctor-" + timestamp_now();
  make_fleet(true);
  probe_ = std::make_unique<JobProbe>(*fleet_, interrupts_, options_.timeouts);
  std::vector<ProbedNode> out;
  try {
    fleet_->start();
    Result<std::vector<int>> nodes = fleet_->select(true);
    if (!nodes.ok()) throw std::runtime_error(nodes.status.code() == StatusCode::cancelled ? "no nodes" : nodes.status.message());
    const std::string log_dir = fs::absolute(spec_.logs.dir).lexically_normal().string();
    out = probe_->run(nodes.value, log_dir, checkpoint_dir, timeout);
  } catch (...) {
    fleet_->shutdown();
    fs::remove_all(dir);
    throw;
  }
  fleet_->shutdown();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return out;
}

}  // namespace dtrain::controller
