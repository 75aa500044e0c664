#include "cli/controller/controller.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "agent/security/credentials.h"
#include "agent/security/x509.h"
#include "cli/controller/remote_agents.h"
#include "common/grpc_options.h"
#include "common/util.h"
#include "common/version.h"

namespace dtrain::controller {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Durations come from a validated spec; duration_ms converts with its bounds checked (spec.h: limits).
milliseconds seconds_to_ms(double seconds) { return spec::duration_ms(seconds); }

std::string signal_text(int signal) {
  const char* name = signal_name(signal);
  return name ? name : "signal " + std::to_string(signal);
}

}  // namespace

Controller::Controller(spec::Spec spec, ControllerOptions options)
    : spec_(std::move(spec)),
      options_(std::move(options)),
      policy_(spec_.restart.max_restarts, seconds_to_ms(spec_.restart.backoff_s)),
      console_(stdout, stderr),
      node_timeout_(seconds_to_ms(spec_.health.node_timeout_s)),
      heartbeat_interval_(std::clamp(node_timeout_ / 5, milliseconds(100), milliseconds(1000))) {}

Controller::~Controller() = default;

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

void Controller::send(int node, const v1::LauncherMessage& message) {
  auto& n = nodes_[static_cast<std::size_t>(node)];
  if (n.connection && n.connection->open() && !n.session_closed && !n.lost) n.connection->send(message);
}

void Controller::lose_node(int node, const std::string& why) {
  auto& n = nodes_[static_cast<std::size_t>(node)];
  if (n.lost) return;
  n.lost = true;
  std::string host = n.info.hostname.empty() ? (n.connection ? n.connection->address() : "?") : n.info.hostname;
  // Named by its node rank in this round (its id in nodes_ is the join order for agents that dial in).
  const auto position = std::find(active_.begin(), active_.end(), node);
  const bool in_round = position != active_.end();
  const long label = in_round ? position - active_.begin() : node;
  std::string text = "node " + std::to_string(label) + " (" + host + ") lost: " + why;
  if (!node_failure_ && in_round) node_failure_ = text;
  console_.note(text);
  // Its agent sees the session end and stops its workers; nothing of this node takes part again.
  if (n.connection && !n.session_closed) n.connection->cancel();
}

int Controller::alive_nodes() const {
  int alive = 0;
  for (const auto& n : nodes_) alive += (n.hello && !n.lost && !n.session_closed) ? 1 : 0;
  return alive;
}

void Controller::configure(int node) {
  v1::LauncherMessage message;
  auto* c = message.mutable_configure();
  c->set_job_id(job_id_);
  c->set_node_rank(static_cast<std::uint32_t>(node));
  c->set_lease_ms(static_cast<std::uint32_t>(node_timeout_.count()));
  c->set_heartbeat_interval_ms(static_cast<std::uint32_t>(heartbeat_interval_.count()));
  c->set_protocol_version(std::string(kProtocolVersion));
  c->set_stop_grace_ms(static_cast<std::uint32_t>(seconds_to_ms(spec_.stop.grace_s).count()));
  send(node, message);
}

bool Controller::uses_tls(const std::string&) const {
  // Every session needs the cluster token, on loopback too (every user of a host reaches its loopback); the
  // local agents this launcher starts itself are reached over their private sockets instead (start_nodes).
  return !options_.insecure;
}

void Controller::load_identity() {
  if (secret_) return;
  try {
    secret_ = security::load_secret(options_.secret_dir.empty() ? security::default_secret_dir() : options_.secret_dir);
  } catch (const security::SecurityError& e) {
    throw security::SecurityError(std::string(e.what()) + ". Every agent session needs the cluster token, on "
                                  "loopback too (--insecure: plaintext without it, for agents started with --insecure)");
  }
  identity_ = security::issue_identity(*secret_, "launcher");
}

std::shared_ptr<grpc::ChannelCredentials> Controller::channel_credentials_for(const std::string& address) {
  if (!uses_tls(address)) return grpc::InsecureChannelCredentials();
  load_identity();
  return security::channel_credentials(*secret_, identity_);
}

std::shared_ptr<grpc::ServerCredentials> Controller::server_credentials_for(const std::string& address) {
  if (!uses_tls(address)) return grpc::InsecureServerCredentials();
  load_identity();
  return security::server_credentials(*secret_, identity_);
}

grpc::ChannelArguments Controller::channel_arguments_for(const std::string& address) {
  grpc::ChannelArguments args = session_channel_arguments();
  if (uses_tls(address)) security::set_tls_target(args);
  return args;
}

void Controller::dial_static_agents() {
  const auto& agents = spec_.nodes.agents;
  bool elastic = spec_.nodes.min_count < spec_.nodes.max_count;
  nodes_.resize(agents.size());
  std::vector<std::string> errors(agents.size());
  std::vector<std::thread> dialers;
  auto timeout = elastic ? seconds_to_ms(spec_.nodes.join_timeout_s) : milliseconds(10000);
  for (std::size_t i = 0; i < agents.size(); ++i) {
    auto connection = std::make_shared<AgentConnection>(static_cast<int>(i), agents[i], events_,
                                                        channel_credentials_for(agents[i]),
                                                        channel_arguments_for(agents[i]), uses_tls(agents[i]));
    nodes_[i].connection = connection;
    nodes_[i].last_heard = Clock::now();
    dialers.emplace_back([connection, timeout, &errors, i] { connection->open(timeout, errors[i]); });
  }
  for (auto& t : dialers) t.join();
  for (std::size_t i = 0; i < agents.size(); ++i) {
    if (errors[i].empty()) continue;
    if (!elastic) throw std::runtime_error("node " + std::to_string(i) + ": " + errors[i]);
    nodes_[i].lost = true;
    nodes_[i].session_closed = true;
    console_.note("node " + std::to_string(i) + " left out: " + errors[i]);
  }
}

void Controller::start_nodes() {
  switch (spec_.nodes.provider) {
    case spec::Provider::local: {
      agent_processes_ = std::make_unique<AgentProcesses>(events_, job_dir_, seconds_to_ms(spec_.stop.grace_s));
      // Sessions over each agent's private socket; the agents place the job's files in <run dir>/<job id>, which
      // is job_dir_ itself with the run dir set to <logs.dir> (and dtrain doctor's disk check looks there).
      const std::string run_dir = std::filesystem::absolute(spec_.logs.dir).string();
      std::vector<std::vector<std::string>> argvs;
      for (int i = 0; i < spec_.nodes.max_count; ++i) {
        argvs.push_back({options_.self_exe, "agent", "--listen", "127.0.0.1:0", "--quiet", "--session-socket",
                         agent_processes_->session_socket(i), "--run-dir", run_dir});
      }
      agent_processes_->start(std::move(argvs));
      // The sockets' paths are known before the agents listen: the channels (and gRPC itself) are set up while the
      // agents start, and dial once they report.
      std::vector<std::shared_ptr<AgentConnection>> connections;
      for (int i = 0; i < spec_.nodes.max_count; ++i) {
        connections.push_back(std::make_shared<AgentConnection>(i, "unix:" + agent_processes_->session_socket(i),
                                                                events_, grpc::InsecureChannelCredentials(),
                                                                session_channel_arguments()));
      }
      agent_processes_->wait_addresses(options_.agent_start_timeout);
      nodes_.resize(connections.size());
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        nodes_[i].connection = connections[i];
        nodes_[i].last_heard = Clock::now();
        std::string error;
        if (!connections[i]->open(milliseconds(10000), error)) throw std::runtime_error("node " + std::to_string(i) + ": " + error);
      }
      break;
    }
    case spec::Provider::static_list:
      dial_static_agents();
      break;
    case spec::Provider::join:
      join_server_ = std::make_unique<JoinServer>(events_, spec_.nodes.rendezvous,
                                                  server_credentials_for(spec_.nodes.rendezvous),
                                                  spec_.nodes.max_count);
      console_.note("waiting for " + std::string(spec_.nodes.min_count == spec_.nodes.max_count ? "" : "at least ") +
                    std::to_string(spec_.nodes.min_count) + " agents to join at " + spec_.nodes.rendezvous +
                    " (dtrain agent --join " + spec_.nodes.rendezvous + ")");
      break;
    case spec::Provider::ssh:
    case spec::Provider::slurm:
      start_remote_agents();
      break;
  }
}

void Controller::start_remote_agents() {
  const bool ssh = spec_.nodes.provider == spec::Provider::ssh;
  const int count = ssh ? static_cast<int>(spec_.nodes.hosts.size()) : slurm_node_count(spec_);
  if (!ssh && spec_.nodes.max_count == 0) spec_.nodes.min_count = spec_.nodes.max_count = count;
  const std::string listen = rendezvous_listen_address(spec_);
  join_server_ = std::make_unique<JoinServer>(events_, listen, server_credentials_for(listen), count);
  RemoteAgentOptions remote;
  remote.dtrain = spec_.nodes.remote_dtrain.empty() ? options_.self_exe : spec_.nodes.remote_dtrain;
  remote.join_address = host_of(listen) + ":" + std::to_string(join_server_->port());
  remote.insecure = options_.insecure;
  remote.secret_dir = options_.secret_dir;  // "" = each node's default directory
  remote.run_dir = std::filesystem::absolute(spec_.logs.dir).string();
  remote.join_timeout_s = spec_.nodes.join_timeout_s;
  std::vector<std::vector<std::string>> commands;
  if (ssh) commands = ssh_agent_commands(spec_, remote);
  else commands.push_back(srun_agent_command(spec_, count, remote));
  remote_slots_ = count;
  slot_failures_.clear();
  console_.note("starting " + std::to_string(count) + " agent" + (count == 1 ? "" : "s") + (ssh ? " over ssh" : " with srun") +
                "; they join at " + remote.join_address + " (their output: " + job_dir_ + "/agent_<n>.log)");
  agent_processes_ = std::make_unique<AgentProcesses>(events_, job_dir_, seconds_to_ms(spec_.stop.grace_s));
  agent_processes_->start(std::move(commands));
}

bool Controller::more_may_join() const {
  if (spec_.nodes.provider == spec::Provider::slurm) {
    int joined = 0;
    for (const auto& n : nodes_) joined += n.hello ? 1 : 0;
    return joined < remote_slots_ && !agent_processes_->exited(0);
  }
  for (int slot = 0; slot < remote_slots_; ++slot) {
    if (node_of_slot(slot) < 0 && !agent_processes_->exited(slot)) return true;
  }
  return false;
}

int Controller::node_of_slot(int slot) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].slot && static_cast<int>(*nodes_[i].slot) == slot) return static_cast<int>(i);
  }
  return -1;
}

bool Controller::select_nodes(bool first_round) {
  const int min = spec_.nodes.min_count, max = spec_.nodes.max_count;
  // Local and fixed-size static jobs wait for every node; elastic and joined ones for MAX until the join timeout,
  // then start with at least MIN.
  const bool dials_in = spec_.nodes.provider == spec::Provider::join || spec_.nodes.provider == spec::Provider::ssh ||
                        spec_.nodes.provider == spec::Provider::slurm;
  const bool launched = spec_.nodes.provider == spec::Provider::ssh || spec_.nodes.provider == spec::Provider::slurm;
  auto deadline = Clock::now() + (first_round || dials_in ? seconds_to_ms(spec_.nodes.join_timeout_s)
                                                          : milliseconds(0));
  if (spec_.nodes.provider == spec::Provider::local) deadline = Clock::now() + options_.agent_start_timeout;
  auto pending = [this] {
    for (const auto& n : nodes_) {
      if (!n.hello && !n.lost && !n.session_closed) return true;
    }
    return false;
  };
  Event event;
  while (interrupted_by_ == 0) {
    int alive = alive_nodes();
    if (alive >= max) break;
    if (Clock::now() >= deadline && !pending()) break;
    if (!dials_in && !pending()) break;
    // Every agent the launcher started has joined or ended: nothing more can come.
    if (launched && !pending() && !more_may_join()) break;
    if (!next_event(event, deadline)) {
      if (Clock::now() >= deadline) {
        if (alive >= min) break;
        if (!pending()) break;
        // Dialed agents that never said hello are lost.
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
          if (!nodes_[i].hello && !nodes_[i].lost) lose_node(static_cast<int>(i), "its agent did not say hello in time");
        }
        break;
      }
      continue;
    }
    apply(event);
  }
  if (interrupted_by_ != 0) return false;
  active_.clear();
  for (std::size_t i = 0; i < nodes_.size() && static_cast<int>(active_.size()) < max; ++i) {
    const auto& n = nodes_[i];
    if (n.hello && !n.lost && !n.session_closed) active_.push_back(static_cast<int>(i));
  }
  if (launched) {
    // Node ranks follow nodes.hosts (ssh) or SLURM_NODEID (slurm), not the order in which agents joined.
    std::stable_sort(active_.begin(), active_.end(), [this](int a, int b) {
      return nodes_[static_cast<std::size_t>(a)].slot.value_or(~0u) < nodes_[static_cast<std::size_t>(b)].slot.value_or(~0u);
    });
  }
  if (static_cast<int>(active_.size()) < min) {
    node_failure_ = "only " + std::to_string(active_.size()) + " node" + (active_.size() == 1 ? "" : "s") +
                    " available, nodes.count needs at least " + std::to_string(min);
    for (const auto& why : slot_failures_) *node_failure_ += "; " + why;
    return false;
  }
  return true;
}

bool Controller::next_event(Event& event, Clock::time_point deadline) {
  while (true) {
    auto now = Clock::now();
    if (now >= next_heartbeat_) {
      v1::LauncherMessage beat;
      beat.mutable_heartbeat()->set_sent_unix_ms(unix_ms());
      for (std::size_t i = 0; i < nodes_.size(); ++i) send(static_cast<int>(i), beat);
      next_heartbeat_ = now + heartbeat_interval_;
    }
    auto wake = std::min(deadline, next_heartbeat_);
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const auto& n = nodes_[i];
      if (n.session_closed || n.lost || !n.connection) continue;
      if (now - n.last_heard > node_timeout_ && !shutting_down_) {
        lose_node(static_cast<int>(i), "no message from its agent for " + std::to_string(node_timeout_.count()) +
                                           " ms (health.node_timeout_s)");
        return false;
      }
      wake = std::min(wake, n.last_heard + node_timeout_ + milliseconds(1));
    }
    if (auto e = events_.pop(wake)) {
      event = std::move(*e);
      return true;
    }
    if (Clock::now() >= deadline) return false;
  }
}

void Controller::apply(const Event& event) {
  switch (event.kind) {
    case Event::Kind::signal:
      ++signals_seen_;
      {
        // The user is waiting: whatever the agents do, the launcher exits within stop.grace_s + 1 s of the first
        // signal (a second one cuts that to a moment). Agents that do not confirm in time stop their workers on
        // their own when the session ends, and local agents are killed with their workers.
        const auto now = Clock::now();
        const auto by = signals_seen_ == 1 ? now + seconds_to_ms(spec_.stop.grace_s) + kExitMargin
                                           : now + kExitMargin / 2;
        exit_by_ = exit_by_ ? std::min(*exit_by_, by) : by;
      }
      if (interrupted_by_ == 0) {
        interrupted_by_ = event.signal;
        console_.note(std::string("received ") + signal_text(event.signal) +
                      ": stopping every worker (send it again to kill them at once)");
      }
      return;
    case Event::Kind::agent_line: {
      // Local agents are their slot's node; an ssh/srun process speaks for the host it was started for.
      if (!event.is_stderr) return;
      // Before its agent joined, an ssh client's complaints end up in the exit note of its slot (and its log).
      if (spec_.nodes.provider == spec::Provider::ssh && node_of_slot(event.node) < 0) return;
      if (spec_.nodes.provider == spec::Provider::local) {
        console_.note("node " + std::to_string(event.node) + " agent: " + event.text);
      } else if (spec_.nodes.provider == spec::Provider::ssh) {
        console_.note(spec_.nodes.hosts[static_cast<std::size_t>(event.node)] + ": " + event.text);
      } else {
        console_.note("srun: " + event.text);
      }
      return;
    }
    case Event::Kind::agent_exited: {
      if (shutting_down_) return;
      if (spec_.nodes.provider == spec::Provider::local) {
        if (event.node >= 0 && static_cast<std::size_t>(event.node) < nodes_.size()) {
          lose_node(event.node, "its agent process " + event.text);
        }
        return;
      }
      const bool ssh = spec_.nodes.provider == spec::Provider::ssh;
      const std::string who = ssh ? "host " + spec_.nodes.hosts[static_cast<std::size_t>(event.node)] + " (nodes.hosts[" +
                                        std::to_string(event.node) + "])"
                                  : "srun";
      const int node = ssh ? node_of_slot(event.node) : -1;
      if (node >= 0) {
        // The session says more (and sooner) when the agent dies; an ssh client ending under a live session
        // means its connection to the host dropped.
        if (!nodes_[static_cast<std::size_t>(node)].lost && !nodes_[static_cast<std::size_t>(node)].session_closed) {
          console_.note(who + ": ssh " + event.text);
        }
        return;
      }
      slot_failures_.push_back(who + ": " + (ssh ? "ssh " : "") + event.text + " before its agent joined (see " +
                               agent_processes_->log_path(event.node) + ")");
      console_.note(slot_failures_.back());
      return;
    }
    case Event::Kind::joined: {
      if (static_cast<std::size_t>(event.node) >= nodes_.size()) nodes_.resize(static_cast<std::size_t>(event.node) + 1);
      auto& n = nodes_[static_cast<std::size_t>(event.node)];
      n.connection = join_server_->session(event.node);
      n.last_heard = Clock::now();
      return;
    }
    case Event::Kind::session_closed: {
      auto& n = nodes_[static_cast<std::size_t>(event.node)];
      n.session_closed = true;
      std::string status = n.connection->finish();
      if (!shutting_down_ && !n.lost) {
        lose_node(event.node, "the session with its agent at " + n.connection->address() + " ended" +
                                  (status.empty() ? " (its agent process died, or the network to it failed)"
                                                  : ": " + status));
      }
      return;
    }
    case Event::Kind::message:
      break;
  }

  auto& node = nodes_[static_cast<std::size_t>(event.node)];
  if (node.lost) return;
  node.last_heard = Clock::now();
  const auto& m = event.message;
  switch (m.body_case()) {
    case v1::AgentMessage::kHello: {
      const auto& f = m.hello().facts();
      if (f.dtrain_version() != version()) {
        console_.note("node " + std::to_string(event.node) + " runs dtrain " + f.dtrain_version() +
                      ", this launcher is " + std::string(version()));
      }
      node.hello = true;
      if (m.hello().has_slot()) node.slot = m.hello().slot();
      node.info.hostname = f.hostname();
      node.info.host_id = f.host_id();
      node.info.agent_address = m.hello().agent_address();
      node.info.address = host_of(m.hello().agent_address());
      node.info.cpus.assign(f.cpus().begin(), f.cpus().end());
      node.info.cpu_numa.assign(f.cpu_numa_node().begin(), f.cpu_numa_node().end());
      node.info.gpu_count = f.gpu_count();
      node.info.tuned_env.clear();
      if (spec_.nodes.provider != spec::Provider::local) {
        // Workers talk over the interface peers reach this node on: nodes.interface, else the one holding the
        // address its agent advertised.
        const std::string& wanted = spec_.nodes.interface;
        std::string iface;
        for (const auto& i : f.interfaces()) {
          if (wanted.empty() ? i.address() == node.info.address : i.name() == wanted) {
            iface = i.name();
            if (!wanted.empty()) node.info.address = i.address();
            break;
          }
        }
        if (!wanted.empty() && iface.empty() && !probing_) {
          lose_node(event.node, "it has no IPv4 address on interface " + wanted + " (nodes.interface)");
          break;
        }
        if (!iface.empty()) {
          node.info.tuned_env["NCCL_SOCKET_IFNAME"] = iface;
          node.info.tuned_env["GLOO_SOCKET_IFNAME"] = iface;
        }
      }
      configure(event.node);
      break;
    }
    case v1::AgentMessage::kProbeResult:
      if (!probe_received_ms_.count(event.node)) probe_received_ms_[event.node] = unix_ms();
      probe_results_[{event.node, m.probe_result().id()}] = m.probe_result();
      break;
    case v1::AgentMessage::kRoundPrepared:
      if (m.round_prepared().round() == round_) prepared_ = m.round_prepared();
      break;
    case v1::AgentMessage::kWorkerStarted:
      if (m.worker_started().round() == round_) {
        auto& w = workers_[m.worker_started().rank()];
        if (!w.started && ++started_workers_ == workers_.size()) {
          auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - round_started_).count();
          console_.note("attempt " + std::to_string(round_) + ": all " + std::to_string(workers_.size()) +
                        " workers started on " + std::to_string(active_.size()) + " node" +
                        (active_.size() == 1 ? "" : "s") + " in " + std::to_string(ms) + " ms");
        }
        w.started = true;
        w.pid = m.worker_started().pid();
      }
      break;
    case v1::AgentMessage::kWorkerExited: {
      const auto& x = m.worker_exited();
      if (!x.log_error().empty()) {
        incomplete_logs_["attempt " + std::to_string(x.round()) + " rank " + std::to_string(x.rank())] =
            x.log_error() + " (" + std::to_string(x.log_bytes_lost()) + " bytes of output not written)";
      }
      if (x.round() != round_) break;
      workers_[x.rank()].exited = true;
      bool failed = !x.spawn_error().empty() || x.signal() != 0 || x.exit_code() != 0;
      if (!failed || x.stopped_by_agent()) break;
      Failure f;
      f.rank = x.rank();
      f.node = x.rank() < plan_.workers.size() ? plan_.workers[x.rank()].node_rank : static_cast<unsigned>(event.node);
      f.host = node.info.hostname;
      f.exit = x;
      if (x.rank() < plan_.workers.size()) f.log_path = plan_.workers[x.rank()].log_path;
      if (!x.log_path().empty()) f.log_path = x.log_path();   // where its agent placed it, on its node
      if (auto h = last_health_.find(x.rank()); h != last_health_.end()) f.last_health = h->second;
      f.failed_unix_ms = x.exit_unix_ms();
      if (!root_cause_) {
        root_cause_ = std::move(f);
      } else {
        other_failures_.push_back(std::move(f));
      }
      break;
    }
    case v1::AgentMessage::kLogLines:
      console_.worker_lines(m.log_lines());
      break;
    case v1::AgentMessage::kLogWriteFailed: {
      const auto& f = m.log_write_failed();
      const std::string key = "attempt " + std::to_string(f.round()) + " rank " + std::to_string(f.rank());
      incomplete_logs_.emplace(key, f.message());
      console_.note("warning: " + key + ": " + f.message() +
                    "; the worker keeps running, but its log file misses everything from here on");
      break;
    }
    case v1::AgentMessage::kGroupDone:
      if (m.group_done().round() == round_) node.group_done = true;
      break;
    case v1::AgentMessage::kGroupStopped:
      if (m.group_stopped().round() == round_) node.group_stopped = true;
      break;
    case v1::AgentMessage::kError:
      lose_node(event.node, "its agent reported: " + m.error().message());
      break;
    case v1::AgentMessage::kWorkerHealth:
      last_health_[m.worker_health().rank()] = m.worker_health();
      break;
    case v1::AgentMessage::kHeartbeat:
    case v1::AgentMessage::kGoodbye:
    case v1::AgentMessage::BODY_NOT_SET:
      break;
  }
}

Controller::Outcome Controller::run_round(int restart_count) {
  round_ = static_cast<std::uint32_t>(restart_count);
  round_started_ = Clock::now();
  started_workers_ = 0;
  workers_.clear();
  last_health_.clear();
  prepared_.reset();
  root_cause_.reset();
  other_failures_.clear();
  node_failure_.reset();
  for (auto& n : nodes_) n.group_done = n.group_stopped = false;
  const int node0 = active_.front();

  std::string attempt_dir = job_dir_ + "/attempt_" + std::to_string(restart_count);
  if (std::error_code ec; !std::filesystem::create_directories(attempt_dir, ec) && ec) {
    throw std::runtime_error("cannot create the attempt's log directory " + attempt_dir + ": " + ec.message());
  }
  // The round's store token: 32 random bytes from OpenSSL, like every other credential of the cluster.
  std::string token = security::x509::random_hex(32);

  v1::LauncherMessage prepare;
  prepare.mutable_prepare_round()->set_round(round_);
  prepare.mutable_prepare_round()->set_store_token(token);
  send(node0, prepare);
  Event event;
  auto deadline = Clock::now() + milliseconds(10000);
  while (!prepared_) {
    if (interrupted_by_ != 0) return Outcome::interrupted;
    if (node_failure_) return Outcome::node_failed;
    if (!next_event(event, deadline)) {
      if (Clock::now() >= deadline) {
        lose_node(node0, "its agent did not prepare round " + std::to_string(round_) + " within 10 s");
        return Outcome::node_failed;
      }
      continue;
    }
    apply(event);
  }

  spec::RoundInfo info;
  info.job_id = job_id_;
  info.restart_count = static_cast<unsigned>(restart_count);
  info.master_addr = nodes_[static_cast<std::size_t>(node0)].info.address;
  info.master_port = prepared_->master_port();
  info.store_address = prepared_->store_address();
  info.store_token = token;
  info.attempt_dir = attempt_dir;
  std::vector<spec::NodeInfo> infos;
  for (int id : active_) infos.push_back(nodes_[static_cast<std::size_t>(id)].info);
  plan_ = spec::make_plan(spec_, infos, info);
  if (restart_count == 0) {
    for (const auto& warning : plan_.warnings) console_.note("warning: " + warning);
  }

  std::vector<v1::LauncherMessage> starts(active_.size());
  for (auto& s : starts) {
    s.mutable_start_group()->set_round(round_);
    s.mutable_start_group()->set_round_token(token);
  }
  for (const auto& w : plan_.workers) {
    auto* spec = starts[w.node_rank].mutable_start_group()->add_workers();
    spec->set_rank(w.rank);
    spec->set_local_rank(w.local_rank);
    for (const auto& a : w.argv) spec->add_argv(a);
    for (const auto& [k, v] : w.env) (*spec->mutable_env())[k] = v;
    spec->set_working_dir(w.working_dir);
    for (unsigned c : w.cpus) spec->add_cpus(c);
    // Named inside the job's directory: each agent places them under its own run directory (agent/run_dir.h).
    spec->set_log_path(std::filesystem::path(w.log_path).lexically_relative(job_dir_).string());
    spec->set_stream_stdout(w.stream_stdout);
    spec->set_stream_stderr(w.stream_stderr);
    spec->set_error_file(std::filesystem::path(w.error_file).lexically_relative(job_dir_).string());
    workers_[w.rank] = Worker{};
  }
  for (std::size_t r = 0; r < active_.size(); ++r) send(active_[r], starts[r]);

  auto forever = Clock::now() + std::chrono::hours(24 * 365);
  while (true) {
    if (interrupted_by_ != 0) {
      stop_round(round_);
      return Outcome::interrupted;
    }
    if (root_cause_) {
      stop_round(round_);
      return Outcome::worker_failed;
    }
    if (node_failure_) {
      stop_round(round_);
      return Outcome::node_failed;
    }
    bool all_done = true;
    for (int id : active_) all_done = all_done && nodes_[static_cast<std::size_t>(id)].group_done;
    if (all_done) return Outcome::success;
    if (next_event(event, forever)) apply(event);
  }
}

Clock::time_point Controller::bounded(Clock::time_point deadline) const {
  return exit_by_ ? std::min(deadline, *exit_by_) : deadline;
}

void Controller::stop_round(std::uint32_t round) {
  auto grace = seconds_to_ms(spec_.stop.grace_s);
  auto send_stop = [&](milliseconds g) {
    v1::LauncherMessage stop;
    stop.mutable_stop_group()->set_round(round);
    stop.mutable_stop_group()->set_grace_ms(static_cast<std::uint32_t>(g.count()));
    stop.mutable_stop_group()->set_reason(interrupted_by_ ? "interrupted" : "another worker or node failed");
    for (int id : active_) send(id, stop);
  };
  send_stop(grace);
  bool escalated = signals_seen_ >= 2;
  if (escalated) send_stop(milliseconds(0));
  const auto own_deadline = Clock::now() + grace + milliseconds(10000);
  Event event;
  while (true) {
    const auto deadline = bounded(own_deadline);
    bool all = true;
    for (int id : active_) {
      const auto& n = nodes_[static_cast<std::size_t>(id)];
      all = all && (n.group_stopped || n.session_closed || n.lost);
    }
    if (all) return;
    if (!escalated && signals_seen_ >= 2) {
      escalated = true;
      send_stop(milliseconds(0));
    }
    if (!next_event(event, deadline)) {
      if (Clock::now() < bounded(own_deadline)) continue;
      for (int id : active_) {
        const auto& n = nodes_[static_cast<std::size_t>(id)];
        if (!n.group_stopped && !n.session_closed && !n.lost) {
          lose_node(id, "its agent did not confirm that the workers stopped");
        }
      }
      return;
    }
    apply(event);
  }
}

void Controller::shutdown_nodes() {
  shutting_down_ = true;
  if (join_server_) join_server_->close();
  v1::LauncherMessage bye;
  bye.mutable_shutdown()->set_reason("job ended");
  for (auto& n : nodes_) {
    if (n.connection && n.connection->open() && !n.session_closed && !n.lost) n.connection->send_last(bye);
  }
  const auto own_deadline = Clock::now() + seconds_to_ms(spec_.stop.grace_s) + milliseconds(10000);
  Event event;
  while (true) {
    bool all = true;
    // A connection that never opened (a refused or unreachable agent) has no session to wait for.
    for (const auto& n : nodes_) all = all && (n.session_closed || n.lost || !n.connection || !n.connection->open());
    if (all) break;
    if (!next_event(event, bounded(own_deadline))) {
      if (Clock::now() < bounded(own_deadline)) continue;
      for (auto& n : nodes_) {
        if (!n.session_closed && n.connection) n.connection->cancel();
      }
      break;
    }
    apply(event);
  }
  for (auto& n : nodes_) {
    if (n.connection) n.connection->finish();
  }
  // Interrupted: what is left of the exit deadline, and no second grace period for agents that ignore it.
  auto wait = milliseconds(5000);
  auto kill_grace = milliseconds(1000);
  if (exit_by_) {
    wait = std::clamp(std::chrono::duration_cast<milliseconds>(*exit_by_ - Clock::now()), milliseconds(0), wait);
    kill_grace = milliseconds(0);
  }
  if (agent_processes_ && !agent_processes_->wait_exit(wait, kill_grace)) {
    console_.note(spec_.nodes.provider == spec::Provider::local
                      ? "a local agent did not exit by itself; it was killed with everything it had started"
                      : "an ssh/srun process did not exit by itself after its agent's session ended; it was killed");
  }
}

std::vector<ProbedNode> Controller::probe(const std::string& checkpoint_dir, milliseconds timeout) {
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / "dtrain-doctor-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory: " + std::string(std::strerror(errno)));
  job_dir_ = dir;
  job_id_ = spec_.name + "-doctor-" + timestamp_now();
  probing_ = true;
  next_heartbeat_ = Clock::now() + heartbeat_interval_;
  std::vector<ProbedNode> out;
  try {
    start_nodes();
    if (!select_nodes(true)) throw std::runtime_error(node_failure_.value_or("no nodes"));
    // Waits until every node of the round answered probe `id` (or is lost), at most `timeout`.
    auto collect = [this, timeout](std::uint32_t id) {
      const auto deadline = Clock::now() + timeout;
      Event event;
      while (interrupted_by_ == 0) {
        bool all = true;
        for (int node : active_) {
          all = all && (probe_results_.count({node, id}) || nodes_[static_cast<std::size_t>(node)].lost);
        }
        if (all) return;
        if (!next_event(event, deadline)) {
          if (Clock::now() >= deadline) return;
          continue;
        }
        apply(event);
      }
    };
    const std::string log_dir = fs::absolute(spec_.logs.dir).lexically_normal().string();
    for (std::size_t rank = 0; rank < active_.size(); ++rank) {
      v1::LauncherMessage message;
      auto* p = message.mutable_probe();
      p->set_id(1);
      p->set_node_checks(true);
      p->set_log_dir(log_dir);
      p->set_checkpoint_dir(checkpoint_dir);
      p->set_open_port(rank == 0);
      send(active_[rank], message);
    }
    collect(1);
    // Node 0's open port and every agent's address, as the other nodes must reach them.
    const int node0 = active_.front();
    std::string master;
    if (auto it = probe_results_.find({node0, 1}); it != probe_results_.end() && it->second.open_port() != 0) {
      master = nodes_[static_cast<std::size_t>(node0)].info.address + ":" + std::to_string(it->second.open_port());
    }
    for (std::size_t rank = 0; rank < active_.size(); ++rank) {
      v1::LauncherMessage message;
      auto* p = message.mutable_probe();
      p->set_id(2);
      p->set_reach_timeout_ms(2000);
      if (rank != 0 && !master.empty()) p->add_reach(master);
      for (std::size_t other = 0; other < active_.size(); ++other) {
        if (other != rank) p->add_reach(nodes_[static_cast<std::size_t>(active_[other])].info.agent_address);
      }
      send(active_[rank], message);
    }
    collect(2);
    for (std::size_t rank = 0; rank < active_.size(); ++rank) {
      const int node = active_[rank];
      ProbedNode probed;
      probed.node_rank = static_cast<unsigned>(rank);
      probed.hostname = nodes_[static_cast<std::size_t>(node)].info.hostname;
      if (auto it = probe_results_.find({node, 1}); it != probe_results_.end()) {
        probed.checks = it->second;
        probed.clock_offset_ms = static_cast<double>(it->second.unix_ms()) - static_cast<double>(probe_received_ms_[node]);
      }
      if (auto it = probe_results_.find({node, 2}); it != probe_results_.end()) probed.reach = it->second;
      out.push_back(std::move(probed));
    }
  } catch (...) {
    shutdown_nodes();
    fs::remove_all(dir);
    throw;
  }
  shutdown_nodes();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return out;
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
  auto started = Clock::now();
  next_heartbeat_ = started + heartbeat_interval_;

  int code = 0;
  int restarts = 0;
  try {
    start_nodes();
    while (interrupted_by_ == 0) {
      if (!select_nodes(restarts == 0)) {
        if (interrupted_by_ == 0) {
          console_.note("job " + job_id_ + " failed: " + node_failure_.value_or("no nodes"));
          code = 1;
        }
        break;
      }
      Outcome outcome = run_round(restarts);
      if (outcome == Outcome::success) {
        auto seconds = std::chrono::duration<double>(Clock::now() - started).count();
        console_.note("job " + job_id_ + " finished: " + std::to_string(plan_.workers.size()) +
                      " ranks exited 0 in " + std::to_string(seconds).substr(0, 5) + " s");
        break;
      }
      if (outcome == Outcome::interrupted) break;
      std::string what = root_cause_ ? "rank " + std::to_string(root_cause_->rank) + " " + describe_exit(root_cause_->exit)
                                     : node_failure_.value_or("a node failed");
      if (!policy_.may_restart(restarts)) {
        if (root_cause_) {
          console_.note(failure_summary(job_id_, *root_cause_, other_failures_, restarts, policy_.max_restarts()));
          code = exit_code_of(root_cause_->exit);
        } else {
          console_.note("job " + job_id_ + " failed: " + what +
                        (policy_.max_restarts() > 0 ? " (no restarts left)" : " (restart.max_restarts is 0)"));
          code = 1;
        }
        break;
      }
      // A lost node never returns under the same id; the next round runs on the nodes left (and on agents that
      // joined meanwhile), if nodes.count's minimum allows.
      ++restarts;
      console_.note("attempt " + std::to_string(restarts - 1) + " failed: " + what + "; restarting (restart " +
                    std::to_string(restarts) + " of " + std::to_string(policy_.max_restarts()) + ") in " +
                    std::to_string(policy_.backoff().count()) + " ms");
      auto until = Clock::now() + policy_.backoff();
      Event event;
      while (interrupted_by_ == 0 && Clock::now() < until) {
        if (next_event(event, until)) apply(event);
      }
    }
  } catch (const spec::PlanError& e) {
    console_.note(std::string("cannot plan the job: ") + e.what());
    code = 2;
  } catch (const std::exception& e) {
    console_.note(e.what());
    code = 1;
  }
  if (interrupted_by_ != 0) {
    console_.note(std::string("interrupted by ") + signal_text(interrupted_by_) + "; every worker was stopped");
    code = 128 + interrupted_by_;
  }
  shutdown_nodes();
  report_incomplete_logs();
  return code;
}

}  // namespace dtrain::controller
