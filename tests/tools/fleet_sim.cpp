// dtrain-fleet-sim: N simulated agents in one process, each a real LauncherService.Join session (TLS and the cluster
// token as `dtrain agent --join` uses them, or plaintext with --insecure) to a real `dtrain launch` with provider
// join. Each answers as an agent does (fleet_sim_agent.h) with no processes behind it, so what is measured is the
// launcher, not process start-up. Thousands of sessions share gRPC's few callback threads and one tick thread.
//
// Prints one JSON object when every session ended (or at --timeout-s): the phases as the agents saw them, in ms
// from the first dial (all_configured: every hello answered; all_started: every StartGroup received; all_exited:
// every simulated worker reported its exit; all_closed: every session ended, the job's end), the launcher's CPU
// seconds at each (--launcher-pid), its peak RSS, the longest launcher silence any healthy agent saw, how long
// the launcher took to notice each dropped agent, and the stalled agent's fate. With --report-hz: when every healthy
// agent had sent its workers' first reports (all_reporting_ms, and the launcher's CPU then), the reports sent, and
// the first dial's wall-clock time (t0_unix_ms), to line the launcher's events up with. Exit 0 when every session ended,
// 1 at the timeout, 2 for a usage error.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/security/credentials.h"
#include "agent/security/identity.h"
#include "agent/security/secret.h"
#include "common/grpc/grpc_options.h"
#include "common/clock.h"
#include "tests/tools/fleet_sim_agent.h"

namespace dtrain::fleet_sim {
namespace {

using std::chrono::milliseconds;

// How often the tick thread looks for due heartbeats, exits and drops: fine enough that a heartbeat is never more
// than this late, coarse enough that a sweep over 4,096 agents costs well under 1% of a core.
constexpr milliseconds kTick{10};
// Joining agents retry their launcher quickly (as agent/session/join_client.cpp does): the launcher may start after them.
constexpr int kReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;
// As agent/session/join_client.cpp: the least time gRPC gives one connection attempt (a handshake queued behind thousands
// of others is not abandoned and redone).
constexpr int kConnectAttemptMs = 20000;
// After its own cancel, how long the simulator waits for every session to end: cancelling is local and immediate,
// so 5 s means a stuck callback, and the report is printed anyway.
constexpr milliseconds kCloseWait{5000};
// The stalled agent's stream window: small, so that a StartGroup of a few hundred KiB fills it.
constexpr int kStalledWindowBytes = 16 * 1024;

struct Options {
  std::string launcher;
  int agents = 0;
  std::string secret_dir;            // "" = default directory
  bool insecure = false;
  AgentOptions agent;                // run, exit codes, cpus
  int drop = 0;                      // the last `drop` agents are dropped ...
  Drop drop_mode = Drop::cut;        // ... this way ...
  milliseconds drop_after{0};        // ... this long after their StartGroup
  int stall_agent = -1;              // this agent stops reading after Configure; it dials after all others
  int launcher_pid = 0;              // read its CPU time and peak RSS from /proc (0: not measured)
  int timeout_s = 120;
};

int usage() {
  std::fprintf(stderr,
               "usage: dtrain-fleet-sim --launcher HOST:PORT --agents N [--secret-dir D | --insecure] [--cpus C]\n"
               "       [--run-ms MS] [--exit-code C] [--fail-rank R --fail-code C]\n"
               "       [--drop K --drop-mode cut|silent --drop-after-ms MS] [--stall-agent I]\n"
               "       [--launcher-pid PID] [--timeout-s S] [--no-batch] [--report-hz R] [--straggler-rank K]\n");
  return 2;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--insecure") {
      o.insecure = true;
      continue;
    }
    if (flag == "--no-batch") {
      o.agent.batch = false;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    const int number = std::atoi(value.c_str());
    if (flag == "--launcher") o.launcher = value;
    else if (flag == "--agents") o.agents = number;
    else if (flag == "--secret-dir") o.secret_dir = value;
    else if (flag == "--cpus") o.agent.cpus = static_cast<unsigned>(number);
    else if (flag == "--run-ms") o.agent.run = milliseconds(number);
    else if (flag == "--exit-code") o.agent.exit_code = number;
    else if (flag == "--fail-rank") o.agent.fail_rank = number;
    else if (flag == "--fail-code") o.agent.fail_code = number;
    else if (flag == "--drop") o.drop = number;
    else if (flag == "--drop-after-ms") o.drop_after = milliseconds(number);
    else if (flag == "--stall-agent") o.stall_agent = number;
    else if (flag == "--launcher-pid") o.launcher_pid = number;
    else if (flag == "--timeout-s") o.timeout_s = number;
    else if (flag == "--report-hz") o.agent.report_hz = std::atof(value.c_str());
    else if (flag == "--straggler-rank") o.agent.straggler_rank = number;
    else if (flag == "--drop-mode" && (value == "cut" || value == "silent")) {
      o.drop_mode = value == "cut" ? Drop::cut : Drop::silent;
    } else {
      return false;
    }
  }
  return !o.launcher.empty() && o.agents > 0 && o.stall_agent < o.agents && o.drop < o.agents &&
         o.agent.report_hz >= 0 && o.agent.report_hz <= 1000;
}

std::shared_ptr<grpc::ChannelCredentials> credentials(const Options& o, grpc::ChannelArguments& args) {
  if (o.insecure) return grpc::InsecureChannelCredentials();
  const auto secret = security::load_secret(o.secret_dir.empty() ? security::default_secret_dir() : o.secret_dir);
  security::set_tls_target(args);
  // One certificate for every simulated agent: a real agent makes its own once at start, before it dials.
  return security::channel_credentials(secret, security::issue_identity(secret, "fleet-sim"));
}

// The launcher's user + system CPU seconds, and its peak RSS in KiB, from /proc (0 when unknown).
double launcher_cpu_s(int pid) {
  if (pid <= 0) return 0;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::atof(field.c_str());
    if (i == 15) stime = std::atof(field.c_str());
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

long launcher_peak_rss_kib(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

std::vector<std::unique_ptr<SimAgent>> make_agents(const Options& o, const grpc::ChannelArguments& args,
                                                   const std::shared_ptr<grpc::ChannelCredentials>& creds) {
  std::vector<std::unique_ptr<SimAgent>> agents;
  for (int i = 0; i < o.agents; ++i) {
    AgentOptions a = o.agent;
    a.index = i;
    a.stall = i == o.stall_agent;
    // The last `drop` agents other than the stalled one.
    const int from_end = o.agents - 1 - i - (o.stall_agent > i ? 1 : 0);
    if (!a.stall && from_end < o.drop) {
      a.drop = o.drop_mode;
      a.drop_after = o.drop_after;
    }
    // Each its own channel and so its own connection and TLS handshake (session_channel_arguments), as agents on
    // separate machines have.
    grpc::ChannelArguments own = args;
    if (a.stall) {
      // Its transport buffers no more than the initial HTTP/2 window for the reads it does not do (no window
      // growth from bandwidth probes): the launcher's writes back up after a few tens of KiB, as they would to an
      // agent process that stopped.
      own.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
      own.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStalledWindowBytes);
    }
    agents.push_back(std::make_unique<SimAgent>(a, grpc::CreateCustomChannel(o.launcher, creds, own)));
  }
  return agents;
}

// This process's CPU time (user + system, every thread) so far.
double own_cpu_s() {
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  return static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
         static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
}

// When each phase was first seen complete (polled), with each side's CPU then.
struct Phase {
  const char* name;
  int bit;                          // SimAgent::Progress bit every counted agent must have
  bool healthy_only;                // count only agents neither dropped nor stalled
  std::optional<Clock::time_point> at;
  double launcher_cpu_s = 0;
  double sim_cpu_s = 0;
};

double ms_since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t - t0).count();
}

// `dial`: each side's CPU at the first dial (start-up, and here the agents' channels and credentials).
void print_report(const Options& o, const std::vector<std::unique_ptr<SimAgent>>& agents, const Phase& dial,
                  const std::vector<Phase>& phases, Clock::time_point t0, long peak_rss_kib,
                  std::optional<Clock::time_point> all_reporting, double reporting_cpu) {
  std::printf("{\"dial_launcher_cpu_s\": %.3f, \"dial_sim_cpu_s\": %.3f, \"agents\": %d, \"tls\": %s, "
              "\"t0_unix_ms\": %llu",
              dial.launcher_cpu_s, dial.sim_cpu_s, o.agents, o.insecure ? "false" : "true",
              static_cast<unsigned long long>(unix_ms() - static_cast<std::uint64_t>(ms_since(t0, Clock::now()))));
  // The exact moment of each phase is the last agent's own timestamp; `_seen_` is when the poll noticed it.
  for (const auto& p : phases) {
    std::optional<Clock::time_point> last;
    for (const auto& a : agents) {
      const AgentTimes t = a->times();
      if (p.healthy_only && (a->options().drop != Drop::none || a->options().stall)) continue;
      const auto& when = p.bit == SimAgent::kConfigured ? t.configured : p.bit == SimAgent::kStarted ? t.started
                         : p.bit == SimAgent::kExited ? t.exited : t.closed;
      if (when && (!last || *when > *last)) last = when;
    }
    std::printf(", \"%s_ms\": %.1f, \"%s_launcher_cpu_s\": %.3f, \"%s_sim_cpu_s\": %.3f", p.name,
                p.at && last ? ms_since(t0, *last) : -1.0, p.name, p.launcher_cpu_s, p.name, p.sim_cpu_s);
  }
  if (o.agent.report_hz > 0) {
    std::uint64_t reports = 0;
    for (const auto& a : agents) reports += a->times().reports;
    std::printf(", \"all_reporting_ms\": %.1f, \"all_reporting_launcher_cpu_s\": %.3f, \"reports\": %llu",
                all_reporting ? ms_since(t0, *all_reporting) : -1.0, reporting_cpu,
                static_cast<unsigned long long>(reports));
  }
  double max_gap = 0, max_late = 0, max_write = 0;
  int lease_lost = 0, goodbyes = 0;
  std::string dropped, stalled = "null";
  for (const auto& a : agents) {
    const AgentTimes t = a->times();
    goodbyes += t.goodbye ? 1 : 0;
    if (a->options().stall) {
      stalled = "{\"agent\": " + std::to_string(a->options().index) + ", \"configured\": " +
                (t.configured ? "true" : "false") + ", \"closed_after_configure_ms\": " +
                std::to_string(t.configured && t.closed ? ms_since(*t.configured, *t.closed) : -1.0) + "}";
    } else if (a->options().drop != Drop::none) {
      const double detect = t.dropped && t.closed ? ms_since(*t.dropped, *t.closed) : -1.0;
      dropped += std::string(dropped.empty() ? "" : ", ") + std::to_string(detect);
    } else {
      max_gap = std::max(max_gap, static_cast<double>(t.max_launcher_gap.count()));
      max_late = std::max(max_late, static_cast<double>(t.max_heartbeat_late.count()));
      max_write = std::max(max_write, static_cast<double>(t.max_write_delay.count()));
      lease_lost += t.lease_lost ? 1 : 0;
    }
  }
  const double sim_cpu = own_cpu_s();
  std::printf(", \"launcher_peak_rss_kib\": %ld, \"healthy_max_launcher_gap_ms\": %.0f, \"healthy_lease_lost\": %d, "
              "\"healthy_max_heartbeat_late_ms\": %.0f, \"healthy_max_write_delay_ms\": %.0f, \"goodbyes\": %d, "
              "\"drop_detect_ms\": [%s], \"stalled\": %s, \"sim_cpu_s\": %.3f}\n",
              peak_rss_kib, max_gap, lease_lost, max_late, max_write, goodbyes, dropped.c_str(), stalled.c_str(),
              sim_cpu);
}

// Ticks every agent until every session ended or the timeout; the stalled agent dials once every other agent was
// configured, so that it is the launcher's last node (node 0 must answer PrepareRound, which a stalled agent would
// not read).
int run(const Options& o, const grpc::ChannelArguments& args, const std::shared_ptr<grpc::ChannelCredentials>& creds) {
  auto agents = make_agents(o, args, creds);
  std::vector<Phase> phases = {{"all_configured", SimAgent::kConfigured, false, {}},
                               {"all_started", SimAgent::kStarted, true, {}},
                               {"all_exited", SimAgent::kExited, true, {}},
                               {"all_closed", SimAgent::kClosed, false, {}}};
  const auto t0 = Clock::now();
  const Phase dial{"dial", 0, false, t0, launcher_cpu_s(o.launcher_pid), own_cpu_s()};
  std::optional<Clock::time_point> all_reporting;
  double reporting_cpu = 0;
  const auto deadline = t0 + std::chrono::seconds(o.timeout_s);
  // A real agent heartbeats from its own process whatever the others do, so the agents that dialed are ticked while
  // the rest dial: beside 4 CPU-bound processes, 1,024 dials took 12 s, and the first agents, configured at once,
  // sent nothing until the last had dialed (the launcher lost them for silence).
  auto ticked = t0;
  for (std::size_t i = 0; i < agents.size(); ++i) {
    if (!agents[i]->options().stall) agents[i]->start();
    const auto now = Clock::now();
    if (now - ticked < kTick) continue;
    for (std::size_t j = 0; j <= i; ++j) agents[j]->tick(now);
    ticked = now;
  }
  bool stall_started = o.stall_agent < 0;
  long peak_rss = 0;
  while (Clock::now() < deadline) {
    const auto now = Clock::now();
    for (auto& a : agents) a->tick(now);
    for (auto& p : phases) {
      if (p.at) continue;
      const bool reached = std::all_of(agents.begin(), agents.end(), [&](const auto& a) {
        if (a->options().stall && p.bit != SimAgent::kClosed) return true;
        if (p.healthy_only && a->options().drop != Drop::none) return true;
        return (a->progress() & p.bit) != 0;
      });
      // Not break: a failed job never reaches all_exited (its workers are stopped) but still ends every session.
      if (!reached) continue;
      p.at = now;
      p.launcher_cpu_s = launcher_cpu_s(o.launcher_pid);
      p.sim_cpu_s = own_cpu_s();
      if (o.launcher_pid > 0) peak_rss = std::max(peak_rss, launcher_peak_rss_kib(o.launcher_pid));
    }
    if (o.agent.report_hz > 0 && !all_reporting &&
        std::all_of(agents.begin(), agents.end(), [](const auto& a) {
          return a->options().drop != Drop::none || a->options().stall || a->times().reported.has_value();
        })) {
      all_reporting = now;
      reporting_cpu = launcher_cpu_s(o.launcher_pid);
    }
    if (!stall_started && phases[0].at) {
      agents[static_cast<std::size_t>(o.stall_agent)]->start();
      stall_started = true;
    }
    if (phases.back().at) break;
    std::this_thread::sleep_for(kTick);
  }
  const bool ended = phases.back().at.has_value();
  for (auto& a : agents) a->cancel();
  const auto closing = Clock::now() + kCloseWait;
  const auto all_closed = [&] {
    return std::all_of(agents.begin(), agents.end(), [](const auto& a) { return a->closed(); });
  };
  while (!all_closed() && Clock::now() < closing) std::this_thread::sleep_for(kTick);
  print_report(o, agents, dial, phases, t0, peak_rss, all_reporting, reporting_cpu);
  std::fflush(stdout);
  // A session that never closed still has gRPC callbacks to come: its agent must outlive them, so exit here.
  if (!all_closed()) std::_Exit(ended ? 0 : 1);
  return ended ? 0 : 1;
}

}  // namespace
}  // namespace dtrain::fleet_sim

int main(int argc, char** argv) {
  using namespace dtrain::fleet_sim;
  Options options;
  if (!parse(argc, argv, options)) return usage();
  dtrain::tune_for_many_sessions();
  grpc::ChannelArguments args = dtrain::session_channel_arguments();
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectAttemptMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  try {
    creds = credentials(options, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain-fleet-sim: %s\n", e.what());
    return 2;
  }
  return run(options, args, creds);
}
