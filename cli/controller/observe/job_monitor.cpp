#include "cli/controller/observe/job_monitor.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>

#include "cli/controller/observe/job_metrics.h"
#include "cli/report/report.h"
#include "common/address.h"
#include "common/clock.h"

namespace dtrain::controller {
namespace {

const char* outcome_name(Round::Outcome outcome) {
  switch (outcome) {
    case Round::Outcome::success: return "succeeded";
    case Round::Outcome::worker_failed: return "worker_failed";
    case Round::Outcome::node_failed: return "node_failed";
    case Round::Outcome::interrupted: return "interrupted";
  }
  return "?";
}

// The CPUs a rank may use: its binding, else its OMP_NUM_THREADS (binding: none), else not known.
unsigned cpus_of(const spec::WorkerPlan& w) {
  return !w.cpus.empty() ? static_cast<unsigned>(w.cpus.size()) : w.omp_threads;
}

}  // namespace

void JobMonitor::job_started(const std::string& job_id, const std::string& job_dir, const spec::Spec& spec) {
  job_dir_ = job_dir;
  status_ = std::make_unique<JobStatus>(job_id);
  diagnoser_ = std::make_unique<Diagnoser>(spec.health.straggler_ratio);
  samples_ = std::make_unique<report::SampleRecorder>(unix_ms());
  if (Status s = events_.open(job_dir + "/" + kEventsFileName); !s.ok()) console_.note("warning: " + s.message());
  auto socket = ControlSocket::listen(job_dir);
  if (socket.ok()) {
    socket_ = std::move(socket.value);
  } else {
    console_.note("warning: " + socket.status.message());
  }
  event("job_start", {{"job", job_id}, {"run_dir", job_dir}, {"name", spec.name}, {"pid", ::getpid()},
                      {"command", spec.command}});
  if (!spec.observe.metrics_addr.empty()) start_metrics(spec.observe.metrics_addr);
  write_snapshot_file("running");
}

void JobMonitor::start_metrics(const std::string& address) {
  auto server = MetricsServer::listen(address);
  if (!server.ok()) {
    console_.note("warning: " + server.status.message());
    return;
  }
  metrics_ = std::move(server.value);
  const std::string url = "http://" + metrics_->address() + "/metrics";
  status_->set_metrics_address(metrics_->address());
  std::string note = "serving Prometheus metrics at " + url;
  // The bound address, numeric: "localhost" is as private as 127.0.0.1, "0.0.0.0" is every interface.
  if (!is_loopback_host(host_of(metrics_->address()))) {
    note += " (reachable from other hosts: the metrics carry no secrets, but anyone who can reach this port reads "
            "the job's progress; use 127.0.0.1 to keep them on this host)";
  }
  console_.note(note);
  event("metrics_listening", {{"address", metrics_->address()}, {"url", url}});
}

void JobMonitor::event(std::string_view name, const nlohmann::ordered_json& fields) {
  const Status s = events_.write(name, fields, unix_ms());
  if (!s.ok() && !events_failed_) {
    events_failed_ = true;
    console_.note("warning: " + s.message());
  }
}

void JobMonitor::round_started(std::uint32_t round, std::size_t nodes) {
  if (!active()) return;
  samples_event(true);   // a window holds one round's steps
  event("round_start", {{"round", round}, {"nodes", nodes}});
}

// The round's plan exists once its workers start: the rows and the diagnoser's places come from it, and the RAM and
// the measured GEMM rate of its nodes from their agents' hellos.
void JobMonitor::adopt(const Round& round) {
  if (adopted_round_ == static_cast<std::int64_t>(round.number())) return;
  adopted_round_ = round.number();
  status_->round_started(round.number(), round.plan());
  for (const auto& w : round.plan().workers) diagnoser_->place(w.rank, RankPlace{w.node_rank, w.host, cpus_of(w)});
  for (std::size_t node = 0; node < round.nodes().size(); ++node) {
    const spec::NodeInfo& info = round.node_info(node);
    diagnoser_->node_memory(static_cast<unsigned>(node), info.mem_total_bytes);
    status_->node_cpu_gemm(static_cast<unsigned>(node), {info.cpu_gemm_flops, info.cpu_gemm_threads});
  }
}

void JobMonitor::on_report(const Round& round, int, const AgentReport& report) {
  if (!active()) return;
  if (const auto* s = std::get_if<WorkerStarted>(&report); s && s->round == round.number()) {
    adopt(round);
    status_->started(*s);
    event("worker_started", {{"round", s->round}, {"rank", s->rank}, {"node", status_->node_of(s->rank).value_or(0)},
                             {"pid", s->pid}});
  } else if (const auto* x = std::get_if<WorkerExit>(&report); x && x->round == round.number()) {
    adopt(round);
    status_->exited(*x);
    event("worker_exited", {{"round", x->round}, {"rank", x->rank}, {"node", status_->node_of(x->rank).value_or(0)},
                            {"pid", x->pid}, {"exit_code", x->exit_code}, {"signal", x->signal},
                            {"outcome", x->failed() ? "failed" : x->stopped_by_agent ? "stopped" : "exited"},
                            {"exit", describe_exit(*x)}, {"runtime_ms", x->runtime_ms}});
  } else if (const auto* h = std::get_if<WorkerHealth>(&report)) {
    adopt(round);
    status_->reported(*h, unix_ms());
    const report::RankSample sample = sample_of(*h);
    diagnoser_->add(h->rank, sample);
    samples_->add(sample);
    samples_->add_points(h->rank, h->points);
  }
}

void JobMonitor::node_lost(const Round* round, int node, const std::string& text) {
  if (!active()) return;
  // Rows are the adopted round's; a node lost before its round planned anything has no row yet.
  if (round != nullptr && adopted_round_ == static_cast<std::int64_t>(round->number())) {
    const auto& ids = round->nodes();
    if (const auto it = std::find(ids.begin(), ids.end(), node); it != ids.end()) {
      status_->node_lost(static_cast<unsigned>(it - ids.begin()));
    }
  }
  event("node_lost", {{"what", text}});
}

void JobMonitor::round_ended(const Round& round, Round::Outcome outcome) {
  if (!active()) return;
  nlohmann::ordered_json fields = {{"round", round.number()}, {"outcome", outcome_name(outcome)}};
  if (const auto& root = round.root_cause()) {
    fields["root_cause"] = {{"rank", root->rank}, {"node", root->node}, {"host", root->host},
                            {"what", describe_failure(*root)}, {"exit_code", exit_code_of(*root)}};
    if (!root->health_failure.empty()) {
      event("health_check_failed", {{"round", round.number()}, {"rank", root->rank}, {"node", root->node},
                                    {"what", root->health_failure}});
      diagnoser_->hang(root->rank, root->health_failure);
    }
  }
  if (const auto& lost = round.node_failure()) fields["node_failure"] = *lost;
  event("round_end", fields);
}

void JobMonitor::tick(Clock::time_point now) {
  if (!active()) return;
  if (now >= next_evaluate_) {
    next_evaluate_ = now + kEvaluateInterval;
    evaluate();
  }
  answer_status_clients();
  answer_scrapes();
  if (now >= next_health_event_) {
    next_health_event_ = now + kHealthEventInterval;
    health_event();
  }
  if (now >= next_file_) {
    next_file_ = now + file_interval(status_->rank_count());
    write_snapshot_file("running");
  }
  samples_event(false);
}

void JobMonitor::samples_event(bool force) {
  if (auto fields = samples_->take(status_->round(), unix_ms(), force)) event("samples", *fields);
}

void JobMonitor::evaluate() {
  diagnoser_->evaluate();
  for (const auto& d : diagnoser_->diagnoses()) {
    std::string key = to_string(d.kind);
    for (unsigned r : d.ranks) key += " " + std::to_string(r);
    if (reported_diagnoses_.insert(key).second) event("diagnosis", to_json(d));
  }
}

void JobMonitor::answer_scrapes() {
  if (!metrics_ || !metrics_->wanted()) return;
  metrics_->publish(format_prometheus(job_metrics(status_->snapshot("running", *diagnoser_, unix_ms()))));
}

void JobMonitor::answer_status_clients() {
  if (!socket_ || !socket_->wanted()) return;
  socket_->publish(status_->snapshot("running", *diagnoser_, unix_ms())
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void JobMonitor::health_event() {
  const auto ranks = status_->ranks();
  if (ranks.empty()) return;
  const std::uint64_t now = unix_ms();
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < ranks.size() && i < kEventRanks; ++i) {
    rows.push_back(status_->rank_json(ranks[i], *diagnoser_, now));
  }
  event("health", {{"round", status_->round()}, {"ranks", std::move(rows)},
                   {"ranks_left_out", ranks.size() > kEventRanks ? ranks.size() - kEventRanks : 0}});
}

void JobMonitor::write_snapshot_file(const std::string& state) {
  const std::string text = status_->snapshot(state, *diagnoser_, unix_ms()).dump(
                               -1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const std::string path = job_dir_ + "/" + kStatusFileName;
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int error = fd < 0 ? errno : 0;
  for (std::size_t done = 0; error == 0 && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = n < 0 ? errno : ENOSPC;
    else done += static_cast<std::size_t>(n);
  }
  // A full disk or NFS may only say so at close.
  if (fd >= 0 && ::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && std::rename(temp.c_str(), path.c_str()) != 0) error = errno;
  if (error == 0) {
    if (status_file_failed_) console_.note(path + " is written again");
    status_file_failed_ = false;
    status_->set_status_file_error("", 0);
    return;
  }
  const std::string why = std::strerror(error);
  ::unlink(temp.c_str());
  // The previous snapshot stays: the live view says it is stale while this launcher runs, and a reader after it
  // ends sees how old it is. One warning, not one every kFileInterval.
  if (status_file_failed_) return;
  status_file_failed_ = true;
  status_->set_status_file_error("cannot write " + path + ": " + why, unix_ms());
  console_.note("warning: cannot write " + path + ": " + why + "; `dtrain status` shows the job live while this "
                "launcher runs, but the file keeps an older snapshot (free space in " + job_dir_ + ")");
}

std::vector<Diagnosis> JobMonitor::job_ended(int exit_code) {
  if (!active()) return {};
  // The last windows: a job shorter than a few evaluations is still diagnosed.
  evaluate();
  health_event();
  samples_event(true);
  const std::string state = exit_code == 0 ? "succeeded" : "failed";
  event("job_end", {{"outcome", state}, {"exit_code", exit_code}});
  write_snapshot_file(state);
  socket_.reset();
  metrics_.reset();
  ended_ = true;
  // The page reads only the job's files, which nothing writes from here on: the agents can stop meanwhile.
  report_ = std::async(std::launch::async, [dir = job_dir_] { return report::write_report(dir); });
  return diagnoser_->diagnoses();
}

// The page is for people after the job: a page that cannot be written is a warning, never a different exit code.
void JobMonitor::report_written() {
  if (!report_.valid()) return;
  const Result<std::string> page = report_.get();
  if (page.ok()) {
    console_.note("report: " + page.value);
  } else {
    console_.note("warning: no report page: " + page.status.message());
  }
}

JobMonitor::~JobMonitor() {
  if (report_.valid()) report_.wait();
}

}  // namespace dtrain::controller
