#include "cli/controller/fleet/fleet.h"

#include <algorithm>
#include <csignal>

#include "cli/controller/transport/launcher_credentials.h"
#include "common/address.h"
#include "common/clock.h"
#include "common/os/syscalls.h"
#include "common/version.h"

namespace dtrain::controller {

using std::chrono::milliseconds;

namespace {
// Up to this many nodes the launcher takes each event as it comes (EventQueue::set_gather).
constexpr int kNoGatherNodes = 32;
}  // namespace

Fleet::Fleet(spec::Spec& spec, FleetOptions options, EventQueue& events, Console& console, Interrupts& interrupts,
             FleetListener& listener)
    : spec_(spec),
      options_(std::move(options)),
      events_(events),
      console_(console),
      interrupts_(interrupts),
      listener_(listener),
      clock_(options_.clock ? options_.clock : std::make_shared<FleetClock>()),
      credentials_(std::make_unique<LauncherCredentials>(options_.insecure, options_.secret_dir)),
      provider_(options_.provider ? options_.provider() : make_provider(spec.nodes.provider)),
      node_timeout_(spec::duration_ms(spec.health.node_timeout_s)),
      // Five heartbeats per node timeout, so that one late message never costs a node. No more often than that:
      // with thousands of agents the heartbeats are most of the launcher's traffic (node_timeout_s 30 and one a
      // second was 8,192 messages a second at 4,096 agents), and how soon a silent node is found depends on the
      // timeout alone.
      heartbeat_interval_(std::max(node_timeout_ / 5, milliseconds(100))),
      next_heartbeat_(clock_->now() + heartbeat_interval_),
      read_lag_(node_timeout_) {
  clock_->stalled();   // stalls count from here on
}

Fleet::~Fleet() = default;

std::uint64_t FleetClock::unix_ms() const { return dtrain::unix_ms(); }

void Fleet::set_job(std::string job_id, std::string job_dir) {
  job_id_ = std::move(job_id);
  job_dir_ = std::move(job_dir);
}

void Fleet::start() {
  provider_->start(*this);
  // Gathering events pays from a few dozen agents on (event_queue.h); below that it only delays each exchange. After
  // the provider's start, which fills nodes.count from a Slurm allocation; events are taken from the next pump on.
  if (spec_.nodes.max_count <= kNoGatherNodes) events_.set_gather(milliseconds(0));
}

void Fleet::grow(std::size_t size) {
  if (size <= nodes_.size()) return;
  in_state_[static_cast<std::size_t>(NodeState::connecting)] += static_cast<int>(size - nodes_.size());
  nodes_.resize(size);
}

void Fleet::set_state(Node& node, NodeState state) {
  --in_state_[static_cast<std::size_t>(node.state)];
  ++in_state_[static_cast<std::size_t>(state)];
  node.state = state;
}

void Fleet::attach(int id, std::shared_ptr<NodeSession> session) {
  grow(static_cast<std::size_t>(id) + 1);
  auto& n = nodes_[static_cast<std::size_t>(id)];
  n.session = std::move(session);
  n.last_heard = live_now();
  next_silence_check_ = std::min(next_silence_check_, n.last_heard + node_timeout_ + milliseconds(1));
}

void Fleet::leave_out(int id, const std::string& why) {
  grow(static_cast<std::size_t>(id) + 1);
  set_state(nodes_[static_cast<std::size_t>(id)], NodeState::lost);
  console_.note("node " + std::to_string(id) + " left out: " + why);
}

int Fleet::node_of_slot(int slot) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].slot && static_cast<int>(*nodes_[i].slot) == slot) return static_cast<int>(i);
  }
  return -1;
}

bool Fleet::gone(int node) const {
  const NodeState s = state(node);
  return s == NodeState::lost || s == NodeState::closed;
}

void Fleet::send(int node, const Command& command) {
  auto& n = nodes_[static_cast<std::size_t>(node)];
  if (n.session && n.session->open() && !gone(node)) n.session->send(command);
}

std::string Fleet::label(int node) const {
  // Named by its node rank in this round (its id is the join order for agents that dial in).
  const auto position = std::find(selected_.begin(), selected_.end(), node);
  const long rank = position != selected_.end() ? position - selected_.begin() : node;
  const auto& n = nodes_[static_cast<std::size_t>(node)];
  const std::string host = !n.info.hostname.empty() ? n.info.hostname : n.session ? n.session->address() : "?";
  return "node " + std::to_string(rank) + " (" + host + ")";
}

void Fleet::lose(int node, const std::string& why) {
  auto& n = nodes_[static_cast<std::size_t>(node)];
  const auto next = next_state(n.state, NodeEvent::failed);
  if (!next) return;
  set_state(n, *next);
  const std::string text = label(node) + " lost: " + why;
  console_.note(text);
  // Its agent sees the session end and stops its workers; nothing of this node takes part again.
  if (n.session) n.session->cancel();
  listener_.on_node_lost(node, text);
}

int Fleet::count(NodeState wanted) const { return in_state_[static_cast<std::size_t>(wanted)]; }

bool Fleet::waiting_for_hello() const { return count(NodeState::connecting) > 0; }

void Fleet::configure(int node) {
  ConfigureNode c;
  c.job_id = job_id_;
  c.node_rank = static_cast<unsigned>(node);
  // The lease runs one heartbeat interval past the node timeout: the last heartbeat before the launcher stalls may
  // be that old, so a launcher stalled for less than node_timeout_s costs no node its workers.
  c.lease_ms = static_cast<std::uint32_t>((node_timeout_ + heartbeat_interval_).count());
  c.heartbeat_interval_ms = static_cast<std::uint32_t>(heartbeat_interval_.count());
  c.stop_grace_ms = static_cast<std::uint32_t>(spec::duration_ms(spec_.stop.grace_s).count());
  send(node, c);
}

void Fleet::on_hello(int node, const AgentHello& hello) {
  auto& n = nodes_[static_cast<std::size_t>(node)];
  const auto next = next_state(n.state, NodeEvent::hello);
  if (!next) return;
  if (hello.dtrain_version != version()) {
    console_.note("node " + std::to_string(node) + " runs dtrain " + hello.dtrain_version + ", this launcher is " +
                  std::string(version()));
  }
  set_state(n, *next);
  if (hello.slot) n.slot = hello.slot;
  n.info.hostname = hello.hostname;
  n.info.host_id = hello.host_id;
  n.info.agent_address = hello.agent_address;
  n.info.address = host_of(hello.agent_address);
  n.info.cpus = hello.cpus;
  n.info.cpu_numa = hello.cpu_numa;
  n.info.gpu_count = hello.gpu_count;
  n.info.mem_total_bytes = hello.mem_total_bytes;
  n.info.cpu_gemm_flops = hello.cpu_gemm_flops;
  n.info.cpu_gemm_threads = hello.cpu_gemm_threads;
  n.info.topology = hello.topology;
  n.info.tuned_env.clear();
  if (provider_->tunes_interface()) {
    // Workers talk over the interface peers reach this node on: nodes.interface, else the one holding the
    // address its agent advertised.
    const std::string& wanted = spec_.nodes.interface;
    std::string iface;
    for (const auto& i : hello.interfaces) {
      if (wanted.empty() ? i.address == n.info.address : i.name == wanted) {
        iface = i.name;
        if (!wanted.empty()) n.info.address = i.address;
        break;
      }
    }
    if (!wanted.empty() && iface.empty() && !options_.probing) {
      lose(node, "it has no IPv4 address on interface " + wanted + " (nodes.interface)");
      return;
    }
    if (!iface.empty()) {
      n.info.tuned_env["NCCL_SOCKET_IFNAME"] = iface;
      n.info.tuned_env["GLOO_SOCKET_IFNAME"] = iface;
    }
  }
  configure(node);
}

void Fleet::on_report(int node, const AgentReport& report) {
  auto& n = nodes_[static_cast<std::size_t>(node)];
  if (n.state == NodeState::lost) return;
  n.last_heard = live_now();
  if (const auto* hello = std::get_if<AgentHello>(&report)) {
    on_hello(node, *hello);
  } else if (const auto* error = std::get_if<AgentError>(&report)) {
    lose(node, "its agent reported: " + error->message);
  } else if (const auto* interrupt = std::get_if<AgentInterrupt>(&report)) {
    // Ctrl-C on a node of a multi-node `dtrain run`: the whole job stops, as for the launcher's own signal.
    const int signal = interrupt->signal > 0 && interrupt->signal < 65 ? interrupt->signal : SIGINT;
    const char* name = signal_name(signal);
    console_.note("node " + std::to_string(node) + " (" + n.info.hostname + ") was interrupted by " +
                  (name ? std::string(name) : "signal " + std::to_string(signal)) + ": stopping the job");
    listener_.on_signal(signal);
  } else if (!std::holds_alternative<AgentAlive>(report)) {
    listener_.on_report(node, report);
  }
}

void Fleet::say_read_lag(milliseconds second) {
  if (!reading_late_ && second >= kSayReadLag) {
    reading_late_ = true;
    console_.note("the launcher reads its agents' messages " + std::to_string(second.count()) +
                  " ms late (its own backlog, or a loaded machine): silence deadlines move by that much");
  } else if (reading_late_ && second < kOrdinaryLag) {
    reading_late_ = false;
    console_.note("the launcher reads its agents' messages on time again");
  }
}

void Fleet::on_session_closed(int node) {
  auto& n = nodes_[static_cast<std::size_t>(node)];
  const Status status = n.session->finish();
  if (!shutting_down_ && !gone(node)) {
    lose(node, "the session with its agent at " + n.session->address() + " ended" +
                   (status.ok() ? " (its agent process died, or the network to it failed)" : ": " + status.message()));
    return;
  }
  if (auto next = next_state(n.state, NodeEvent::session_ended)) set_state(n, *next);
}

void Fleet::apply(const Event& event) {
  switch (event.kind) {
    case Event::Kind::signal: listener_.on_signal(event.signal); return;
    case Event::Kind::agent_line: provider_->on_agent_line(*this, event); return;
    case Event::Kind::agent_exited:
      if (!shutting_down_) provider_->on_agent_exited(*this, event);
      return;
    case Event::Kind::joined: provider_->on_joined(*this, event); return;
    case Event::Kind::session_closed: on_session_closed(event.node); return;
    case Event::Kind::report:
      if (event.sent_unix_ms != 0 && !gone(event.node)) {
        if (const auto second = read_lag_.sample(event.node, event.sent_unix_ms, clock_->unix_ms(), live_now())) {
          say_read_lag(*second);
        }
      }
      on_report(event.node, event.report);
      return;
  }
}

}  // namespace dtrain::controller
