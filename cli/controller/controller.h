#pragma once

// The launcher: a thin sequence of rounds over a fleet.
//
//   Controller            runs the job: job directory, rounds, RestartPolicy, the final verdict and exit code
//     Fleet               the agent sessions (heartbeats, node timeout, node states, selecting a round's nodes)
//       Provider          how the agents are had: local, static, join, ssh, slurm (one file each)
//       AgentConnection / JoinServer    the sessions themselves; wire.h converts at their edge
//     Round               one attempt: prepare, plan, start, wait, stop (unit-tested with a scripted fleet)
//     JobProbe            `dtrain doctor JOB.yaml` instead of rounds
//
// One thread runs all of it: every input (agent reports, closed sessions, signals, the agent processes the
// launcher started) arrives on the EventQueue and is applied by Fleet::pump_until, which hands what is not the
// fleet's own to the Controller (FleetListener), which hands round reports to the current Round.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/controller/console/console.h"
#include "cli/controller/session/event_queue.h"
#include "cli/controller/fleet/fleet.h"
#include "cli/controller/round/interrupts.h"
#include "cli/controller/observe/job_monitor.h"
#include "cli/controller/job_probe.h"
#include "cli/controller/round/restart_policy.h"
#include "cli/controller/round/round.h"
#include "cli/controller/round/timeouts.h"
#include "cli/spec/spec.h"

namespace dtrain::controller {

struct ControllerOptions {
  std::string self_exe;             // the dtrain binary (local agents are started from it)
  bool insecure = false;            // plaintext to agents, without the cluster token (--insecure)
  std::string secret_dir;           // cluster secret for TLS + token ("" = the default directory)
  Timeouts timeouts;
};

class Controller final : public FleetListener {
 public:
  Controller(spec::Spec spec, ControllerOptions options);
  ~Controller() override;

  // Runs the job to its end; returns the launcher's exit code (README "Commands": 0, root cause's code, 128+signal, 130).
  int run();

  // `dtrain doctor JOB.yaml`: gets the job's nodes as a launch would, probes every agent (job_probe.h), then lets
  // the agents go. Throws std::runtime_error when the nodes cannot be had.
  std::vector<ProbedNode> probe(const std::string& checkpoint_dir, std::chrono::milliseconds timeout);

  // From the signal thread: the first SIGINT/SIGTERM/SIGHUP stops every worker gracefully, a second one at once.
  void signal(int signal) {
    Event event;
    event.kind = Event::Kind::signal;
    event.signal = signal;
    events_.push(std::move(event));
  }

  // FleetListener: what the fleet's pump hands on.
  void on_signal(int signal) override;
  void on_report(int node, const AgentReport& report) override;
  void on_node_lost(int node, const std::string& text) override;
  void on_tick(std::chrono::steady_clock::time_point now) override { monitor_.tick(now); }

 private:
  std::string make_job_dir();
  // Rounds until one succeeds, the policy allows no more, or a signal; returns the exit code.
  int run_rounds(std::chrono::steady_clock::time_point started);
  // After a failed round: the exit code when the job ends here, or nothing when it restarts (after the backoff).
  std::optional<int> after_failure(const Round& round, int restarts);
  // A warning naming every log file that could not be written completely (a full disk), if any.
  void report_incomplete_logs();
  void make_fleet(bool probing);

  spec::Spec spec_;
  ControllerOptions options_;
  RestartPolicy policy_;
  Console console_;
  EventQueue events_;
  Interrupts interrupts_;
  std::unique_ptr<Fleet> fleet_;
  std::string job_id_;
  std::string job_dir_;
  // The latest round (reports that arrive after it ended, such as the exits of stopped workers, still reach it),
  // and dtrain doctor's probe.
  std::unique_ptr<Round> round_;
  std::unique_ptr<JobProbe> probe_;
  // Log files that could not be written (full disk, ...), by "attempt A rank R"; kept over all rounds, so that a
  // finished job still says that its logs are incomplete.
  std::map<std::string, std::string> incomplete_logs_;
  // Events, status and diagnoses of the job (nothing for dtrain doctor's probe).
  JobMonitor monitor_{console_};
};

}  // namespace dtrain::controller
