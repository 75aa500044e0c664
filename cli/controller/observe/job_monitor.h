#pragma once

// What the launcher keeps of a running job for people and tools, beside running it: the event log
// (events.jsonl), the status snapshot (status.json, and the control socket that serves it live) and the
// diagnoses (diagnosis.h). The Controller feeds it what it already sees (reports, lost nodes, rounds, the end) and
// calls tick() from the fleet's pump; it never changes how the job runs.
//
//   every kEvaluateInterval   the diagnoser closes a window per rank; new diagnoses go to the event log
//   every tick, when asked    a snapshot for the control socket's waiting client (control_socket.h), and the
//                             snapshot's numbers for a waiting /metrics scrape (observe.metrics_addr;
//                             metrics_server.h)
//   every file_interval()     status.json is rewritten (temp file + rename: a reader sees a whole snapshot): 5 s, and
//                             5 s more per 4,096 ranks
//   every kHealthEventInterval  one "health" event with every rank's latest report (at most kEventRanks ranks)
//   every samples window      one "samples" event: each rank's steps of the window, compact (cli/report/model/samples.h);
//                             the window grows with the job's age, and closes early when a round or the job ends;
//                             in a round's first windows it also holds the reports' per-step points (bounded), the
//                             report page's curves' one source of them
//   at the end                a last health event, the last samples, job_end, the final status.json, the report
//                             page (report.html) and the diagnoses for the summary

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/controller/console/console.h"
#include "cli/controller/observe/control_socket.h"
#include "cli/controller/diagnose/diagnosis.h"
#include "cli/controller/observe/events.h"
#include "cli/controller/observe/job_status.h"
#include "cli/controller/observe/metrics_server.h"
#include "cli/controller/round/round.h"
#include "cli/report/model/samples.h"
#include "cli/spec/spec.h"

namespace dtrain::controller {

inline constexpr const char* kEventsFileName = "events.jsonl";
inline constexpr const char* kStatusFileName = "status.json";

class JobMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  // How fresh a live `dtrain status` is, and how often a rank's window closes: once a second is as often as a
  // person reads a table, and cheap next to the reports themselves.
  static constexpr std::chrono::milliseconds kEvaluateInterval{1000};
  // status.json is for a job that ended or a launcher that died: a few seconds old is enough, and a snapshot of
  // thousands of ranks is megabytes. Every kFileInterval per kFileIntervalRanks ranks: a snapshot of 32,768 ranks is
  // 14 MB, and written every 5 s it took a tenth of the launcher's CPU; every 40 s it takes a hundredth.
  static constexpr std::chrono::milliseconds kFileInterval{5000};
  static constexpr std::size_t kFileIntervalRanks = 4096;
  static std::chrono::milliseconds file_interval(std::size_t ranks) {
    return kFileInterval * static_cast<long>(std::max<std::size_t>(1, (ranks + kFileIntervalRanks - 1) /
                                                                           kFileIntervalRanks));
  }
  // The event log's health lines: enough to follow a job's progress afterwards, few enough that a week-long job's
  // log stays in the hundreds of MB.
  static constexpr std::chrono::milliseconds kHealthEventInterval{10000};
  // Ranks per health event: one line of a 65,536-rank job would be tens of MB; the first ranks and a count say
  // enough, and status.json has them all.
  static constexpr std::size_t kEventRanks = 1024;

  explicit JobMonitor(Console& console) : console_(console) {}

  // Opens the event log and the control socket in the job's directory, and the metrics endpoint when the spec asks
  // for one; what cannot be opened is warned about (the job runs without it).
  void job_started(const std::string& job_id, const std::string& job_dir, const spec::Spec& spec);
  void round_started(std::uint32_t round, std::size_t nodes);
  void round_ended(const Round& round, Round::Outcome outcome);
  void on_report(const Round& round, int node, const AgentReport& report);
  // The launcher gave up fleet node `node`; `round` is the latest round (nullptr before the first).
  void node_lost(const Round* round, int node, const std::string& text);
  void tick(Clock::time_point now);
  // Writes the end and the last snapshot, closes the socket, and starts writing the report page on a thread of its
  // own; returns the diagnoses for the summary. From then on the monitor records nothing more (the page reads the
  // event log and the snapshot as they are now), so the launcher can end its agents while the page is written.
  std::vector<Diagnosis> job_ended(int exit_code);
  // Waits for the report page that job_ended started and says where it is (or why there is none). Call once the
  // agents are gone; the destructor waits too.
  void report_written();
  ~JobMonitor();

 private:
  bool active() const { return status_ != nullptr && !ended_; }
  void event(std::string_view name, const nlohmann::ordered_json& fields);
  void adopt(const Round& round);
  void start_metrics(const std::string& address);
  void evaluate();
  // A fresh snapshot for the control socket when a client waits for one (ControlSocket::wanted).
  void answer_status_clients();
  // Fresh metrics when a scrape waits for them (MetricsServer::wanted).
  void answer_scrapes();
  void health_event();
  void samples_event(bool force);
  void write_snapshot_file(const std::string& state);

  Console& console_;
  std::string job_dir_;
  EventLog events_;
  bool events_failed_ = false;
  bool status_file_failed_ = false;   // the last write of status.json failed (warned once until one succeeds)
  std::unique_ptr<JobStatus> status_;
  std::unique_ptr<Diagnoser> diagnoser_;
  std::unique_ptr<ControlSocket> socket_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<report::SampleRecorder> samples_;
  std::int64_t adopted_round_ = -1;
  bool ended_ = false;                         // job_ended ran: nothing more is recorded
  std::future<Result<std::string>> report_;   // the report page being written (job_ended), its path or why not
  std::set<std::string> reported_diagnoses_;   // kind and ranks of each diagnosis already in the event log
  Clock::time_point next_evaluate_{}, next_file_{}, next_health_event_{};
};

}  // namespace dtrain::controller
