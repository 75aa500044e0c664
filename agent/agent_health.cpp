// The agent's part in health reports over the health socket (health_socket.h): starting it, and what it does with
// a datagram. The gRPC path is ReportService (service/report_service.h); both check the values with
// check_report_values (health/report_values.h) and end in forward_report.

#include <filesystem>
#include <map>

#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/health/report_values.h"
#include "agent/job/python_command.h"
#include "agent/service/health_socket.h"
#include "agent/session/wire.h"

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

std::unique_ptr<HealthSocket> Agent::start_health_socket() {
  std::map<std::string, std::string> env = worker_tls_ ? worker_tls_->env() : std::map<std::string, std::string>{};
  std::unique_ptr<HealthSocket> socket;
  try {
    socket = std::make_unique<HealthSocket>(
        runtime_dir_->make_subdir("health") + "/socket",
        [this](const HealthDatagram& datagram) { return accept_datagram(datagram); });
    env["DTRAIN_HEALTH_SOCKET"] = socket->path();
  } catch (const std::exception& e) {
    spdlog::warn("{}; workers get no DTRAIN_HEALTH_SOCKET (the Python health helper does nothing, gRPC reports "
                 "still work)", e.what());
  }
  runner_->set_worker_env(std::move(env));
  runner_->set_python_dirs(python_dirs());
  if (socket) runner_->set_before_exit([raw = socket.get()] { raw->drain(); });
  return socket;
}

Status Agent::accept_datagram(const HealthDatagram& datagram) {
  const v1::WorkerReport& report = datagram.report;
  if (Status refused = check_reporter(datagram.token, datagram.report_token, report.rank()); !refused.ok()) {
    return refused;
  }
  if (Status other = runner_->check_sender(report.rank(), datagram.sender); !other.ok()) return other;
  if (Status implausible = check_report_values(report); !implausible.ok()) return implausible;
  runner_->note_dump_signal(report.rank(), datagram.sender, report.dump_signal());
  forward_report(wire::health_of(report));
  return {};
}

}  // namespace dtrain::agent
