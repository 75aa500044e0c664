// The agent's part in health reports: the health socket (health_socket.h), starting it and what it does with a
// datagram, and for either path (the gRPC one is ReportService, service/report_service.h) the check of who may
// report for a rank and the forwarding onto the session. Both check the values with check_report_values
// (health/report_values.h) and end in forward_report.

#include <filesystem>
#include <map>

#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/health/report_values.h"
#include "agent/job/python_command.h"
#include "agent/service/health_socket.h"
#include "agent/security/x509.h"
#include "agent/session/outbox.h"
#include "agent/session/wire.h"
#include "common/clock.h"

namespace dtrain::agent {
namespace {

// Where the Python health helper and the PyTorch bootstrap are (worker/CMakeLists.txt):
// <dir of this binary>/../share/dtrain/python and its bootstrap/, in the build tree as after an install; "" for
// each that is not there.
PythonDirs python_dirs() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const std::filesystem::path dir = exe.parent_path().parent_path() / "share" / "dtrain" / "python";
  PythonDirs dirs;
  if (std::filesystem::exists(dir / "dtrain_health.py", ec)) dirs.helper = dir.string();
  // The bootstrap reports through the helper: without it, it would have nothing to report with.
  if (!dirs.helper.empty() && std::filesystem::exists(dir / "bootstrap" / "sitecustomize.py", ec)) {
    dirs.bootstrap = (dir / "bootstrap").string();
  }
  return dirs;
}

}  // namespace

std::unique_ptr<HealthSocket> Agent::start_health_socket(JobRunnerHooks& hooks) {
  std::unique_ptr<HealthSocket> socket;
  try {
    socket = std::make_unique<HealthSocket>(
        runtime_dir_->make_subdir("health") + "/socket",
        [this](const HealthDatagram& datagram) { return accept_datagram(datagram); });
    hooks.worker_env["DTRAIN_HEALTH_SOCKET"] = socket->path();
  } catch (const std::exception& e) {
    spdlog::warn("{}; workers get no DTRAIN_HEALTH_SOCKET (the Python health helper does nothing, gRPC reports "
                 "still work)", e.what());
  }
  hooks.python_dirs = python_dirs();
  if (socket) {
    std::lock_guard lock(health_socket_mutex_);
    health_socket_ = socket.get();
    hooks.before_exit = [this] { drain_health_socket(); };
  }
  return socket;
}

void Agent::drain_health_socket() {
  std::lock_guard lock(health_socket_mutex_);
  if (health_socket_ != nullptr) health_socket_->drain();
}

void Agent::forget_health_socket() {
  std::lock_guard lock(health_socket_mutex_);
  health_socket_ = nullptr;
}

Status Agent::accept_datagram(const HealthDatagram& datagram) {
  const v1::WorkerReport& report = datagram.report;
  if (Status refused = check_reporter(datagram.token, datagram.report_token, report.rank()); !refused.ok()) {
    return refused;
  }
  // check_reporter accepted it: the runner exists.
  JobRunner& runner = *reporting_runner_.load(std::memory_order_acquire);
  if (Status other = runner.check_sender(report.rank(), datagram.sender); !other.ok()) return other;
  if (Status implausible = check_report_values(report); !implausible.ok()) return implausible;
  runner.note_dump_signal(report.rank(), datagram.sender, report.dump_signal());
  forward_report(wire::health_of(report));
  return {};
}

Status Agent::check_reporter(const std::string& token, const std::string& report_token, std::uint32_t rank) const {
  const JobRunner* runner = reporting_runner_.load(std::memory_order_acquire);
  if (runner == nullptr) return {StatusCode::unavailable, "the agent is still starting"};
  if (token.empty() || !security::x509::constant_time_equal(token, runner->current_token())) {
    return {StatusCode::permission_denied, "the dtrain-token metadata is missing or not this round's DTRAIN_JOB_TOKEN"};
  }
  return runner->check_reporter(rank, report_token);
}

void Agent::forward_report(const v1::WorkerHealth& health) {
  std::lock_guard lock(mutex_);
  if (outbox_ != nullptr) outbox_->push_report(wire::to_wire(health, unix_ms()));
}

}  // namespace dtrain::agent
