// dtrain: launcher and job orchestrator for distributed training. See README.md for the commands.

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <string_view>

#include <grpc/support/log.h>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>
#include <thread>

#include "agent/supervisor/supervisor.h"
#include "cli/commands.h"
#include "common/version.h"

namespace dtrain::cli {

namespace {

std::mutex signal_mutex;
std::function<void(int)> signal_handler;
std::vector<int> pending_signals;

}  // namespace

void block_termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    while (true) {
      int signal = 0;
      if (sigwait(&set, &signal) != 0) continue;
      std::lock_guard lock(signal_mutex);
      if (signal_handler) {
        signal_handler(signal);
      } else {
        pending_signals.push_back(signal);
      }
    }
  }).detach();
}

void on_termination_signal(std::function<void(int)> handler) {
  std::lock_guard lock(signal_mutex);
  signal_handler = std::move(handler);
  if (signal_handler) {
    for (int signal : pending_signals) signal_handler(signal);
    pending_signals.clear();
  }
}

std::string self_executable() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "dtrain";
  return std::string(path, static_cast<std::size_t>(n));
}

}  // namespace dtrain::cli

namespace {

// gRPC logs each failed TLS handshake attempt on stderr; dtrain explains such failures itself (which check failed,
// what to do), so those lines are dropped. Everything else gRPC logs still goes to stderr.
void log_grpc(gpr_log_func_args* args) {
  std::string_view message = args->message ? args->message : "";
  if (message.find("Handshake failed") != std::string_view::npos) return;
  std::fprintf(stderr, "grpc %s: %s\n", gpr_log_severity_string(args->severity), args->message);
}

// Ends the process once a command has returned (its objects, sessions, servers and files are closed by then)
// without running atexit handlers and static destructors. gRPC keeps background threads (timers, reconnect
// attempts of channels already destroyed) that may still create a TLS handshaker while OpenSSL's atexit cleanup
// runs; that crashed a refused launcher about one time in five. Nothing of dtrain's own needs those handlers.
[[noreturn]] int exit_now(int code) {
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  gpr_set_log_function(log_grpc);
  // Before any thread exists: SIGCHLD is blocked (the supervisor reads it from a signalfd) and this process adopts
  // orphaned descendants, so nothing it starts can escape.
  dtrain::supervisor::prepare_process();

  CLI::App app{"dtrain: launch and supervise distributed training jobs", "dtrain"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(dtrain::version()));
  dtrain::cli::Action launch = dtrain::cli::add_launch_command(app);
  dtrain::cli::Action run = dtrain::cli::add_run_command(app);
  dtrain::cli::Action validate = dtrain::cli::add_validate_command(app);
  dtrain::cli::Action agent = dtrain::cli::add_agent_command(app);
  dtrain::cli::Action secret = dtrain::cli::add_secret_command(app);
  dtrain::cli::Action topo = dtrain::cli::add_topo_command(app);
  dtrain::cli::Action doctor = dtrain::cli::add_doctor_command(app);
  dtrain::cli::Action bench = dtrain::cli::add_bench_command(app);
  dtrain::cli::Action plan = dtrain::cli::add_plan_command(app);
  dtrain::cli::Action status = dtrain::cli::add_status_command(app);
  dtrain::cli::Action report = dtrain::cli::add_report_command(app);
  dtrain::cli::Action tune = dtrain::cli::add_tune_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  for (auto* sub : app.get_subcommands()) {
    std::string name = sub->get_name();
    if (name == "launch") return exit_now(launch());
    if (name == "run") return exit_now(run());
    if (name == "validate") return exit_now(validate());
    if (name == "agent") return exit_now(agent());
    if (name == "secret") return exit_now(secret());
    if (name == "topo") return exit_now(topo());
    if (name == "doctor") return exit_now(doctor());
    if (name == "bench") return exit_now(bench());
    if (name == "plan") return exit_now(plan());
    if (name == "status") return exit_now(status());
    if (name == "report") return exit_now(report());
    if (name == "tune") return exit_now(tune());
  }
  return 2;
}
