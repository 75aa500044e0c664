// What containment costs per worker: spawn latency and memory of a worker below a keeper (the Supervisor's way,
// agent/supervisor/process/keeper.h) against a plain fork + exec from the same process (the way before keepers: the same
// pipes, process group, parent-death signal and exec report, no keeper), and the part of Supervisor::spawn that
// is no process at all (the hop to its thread). One driver, one row per case, the cases interleaved.
//
//   dtrain-spawn-bench [--workers N] [--ballast-mb M] [--program PATH] [--pid-namespace 0|1]
//
// --pid-namespace 1: the Supervisor keeps its workers in a PID namespace (pid_namespace.h), as an agent running as
// root does: the keeper row then includes joining it, and the first line says what making it took.
// --ballast-mb: anonymous memory the bench dirties before spawning, to stand in for a bigger agent (fork copies
// page tables, and a keeper shares the agent's pages copy-on-write). A real `dtrain agent` has ~2.5 MiB of
// anonymous memory and ~20 MiB of file-backed (shared library) pages.
// Columns: keeper_pte_kb = the keeper's page tables (kernel memory, not in USS); keeper_uss_kb = pages only one keeper maps (its true marginal cost); keepers_pss_mb = all keepers'
// proportional share of the pages they map; pss_after_cow_mb = the same after this process rewrote its ballast:
// the keepers then alone hold the copy they were forked with (at most one copy of the agent's dirty memory per
// batch of keepers forked together).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "agent/supervisor/process_tree.h"
#include "agent/supervisor/supervisor.h"

using namespace dtrain::supervisor;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchOptions {
  int workers = 100;
  std::size_t ballast_mb = 0;
  std::string program = "/bin/sleep";
  bool pid_namespace = false;
};

// kB fields of /proc/<pid>/smaps_rollup (Rss, Pss, Private_Clean, Private_Dirty, ...).
std::map<std::string, long> smaps_rollup(pid_t pid) {
  std::map<std::string, long> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string key;
  long value = 0;
  std::string unit;
  std::string header;
  std::getline(in, header);
  while (in >> key >> value >> unit) out[key.substr(0, key.size() - 1)] = value;
  return out;
}

struct Row {
  std::string name;
  std::vector<double> spawn_us;  // one per worker
  double keeper_uss_kib = 0;     // mean over keepers: pages only it maps
  double keeper_pte_kib = 0;     // mean over keepers: its page tables (VmPTE, kernel memory)
  double keeper_pss_kib = 0;     // sum over keepers: their share of every page they map
  double keeper_pss_after_kib = 0;  // the same after the agent rewrote its ballast (copy-on-write breaks)
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// The pre-keeper launch: fork from this (multi-threaded) process, the child sets up and execs, the parent waits for
// the close-on-exec report pipe's EOF.
pid_t plain_spawn(const BenchOptions& options) {
  int out[2], err[2], report[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) std::exit(1);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  char* argv[] = {const_cast<char*>(options.program.c_str()), const_cast<char*>("300"), nullptr};
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(null_fd, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[0], argv);
    _exit(127);
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  close(report[1]);
  close(null_fd);
  pollfd p{report[0], POLLIN, 0};
  char byte;
  if (poll(&p, 1, 5000) != 1 || read(report[0], &byte, 1) != 0) std::exit(1);
  close(report[0]);
  close(out[0]);
  close(err[0]);
  return pid;
}

bool is_keeper(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name == "dtrain-keeper";
}

// Mean USS and page tables per keeper, and all keepers' PSS (KiB).
void measure_keepers(double& uss, double& pss, double& pte) {
  std::size_t keepers = 0;
  for (const pid_t pid : descendants(getpid())) {
    if (!is_keeper(pid)) continue;
    ++keepers;
    auto m = smaps_rollup(pid);
    uss += static_cast<double>(m["Private_Clean"] + m["Private_Dirty"]);
    pss += static_cast<double>(m["Pss"]);
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmPTE:", 0) == 0) pte += static_cast<double>(std::atol(line.c_str() + 6));
    }
  }
  uss /= static_cast<double>(std::max<std::size_t>(keepers, 1));
  pte /= static_cast<double>(std::max<std::size_t>(keepers, 1));
}

// Both cases, one spawn of each in turn, so that load from elsewhere on the machine hits both alike.
std::vector<Row> run(const BenchOptions& options, std::vector<char>& ballast) {
  Row plain{"fork+exec (no containment)", {}, 0, 0, 0, 0};
  Row kept{options.pid_namespace ? "Supervisor::spawn (keeper+ns)" : "Supervisor::spawn (keeper)", {}, 0, 0, 0, 0};
  Row hop{"Supervisor::spawn, no fork", {}, 0, 0, 0, 0};
  dtrain::supervisor::Options contained;
  contained.pid_namespace = options.pid_namespace;
  const auto made = Clock::now();
  Supervisor supervisor(Events{}, contained);
  std::printf("# containment: %s (Supervisor made in %.1f ms)\n", supervisor.containment().c_str(),
              std::chrono::duration<double, std::milli>(Clock::now() - made).count());
  for (int i = 0; i < options.workers; ++i) {
    // What spawn costs besides processes: the hop to the supervisor thread and back (an empty argv fails at once).
    auto start = Clock::now();
    supervisor.spawn({ProcessSpec{}});
    hop.spawn_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    start = Clock::now();
    plain_spawn(options);
    plain.spawn_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    ProcessSpec spec;
    spec.id = static_cast<std::uint64_t>(i);
    spec.argv = {options.program, "300"};
    start = Clock::now();
    supervisor.spawn({spec});
    kept.spawn_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  measure_keepers(kept.keeper_uss_kib, kept.keeper_pss_kib, kept.keeper_pte_kib);
  // The agent goes on changing its memory; the keepers keep the copy they were forked with.
  std::fill(ballast.begin(), ballast.end(), 2);
  double unused = 0, unused_pte = 0;
  measure_keepers(unused, kept.keeper_pss_after_kib, unused_pte);
  // The plain children are descendants too: the sweep ends them all.
  supervisor.stop_all_and_wait(std::chrono::milliseconds(0), std::chrono::seconds(30));
  return {plain, kept, hop};
}

}  // namespace

int main(int argc, char** argv) {
  prepare_process();
  BenchOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--workers") {
      options.workers = std::atoi(argv[i + 1]);
    } else if (flag == "--ballast-mb") {
      options.ballast_mb = static_cast<std::size_t>(std::atol(argv[i + 1]));
    } else if (flag == "--program") {
      options.program = argv[i + 1];
    } else if (flag == "--pid-namespace") {
      options.pid_namespace = std::string(argv[i + 1]) == "1";
    } else {
      std::fprintf(stderr, "usage: %s [--workers N] [--ballast-mb M] [--program PATH] [--pid-namespace 0|1]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<char> ballast(options.ballast_mb << 20, 1);
  long rss_kib = 0;
  {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) rss_kib = std::atol(line.c_str() + 6);
    }
  }
  std::printf("# %d workers (%s 300), this process: %ld KiB RSS (%zu MiB ballast)\n", options.workers,
              options.program.c_str(), rss_kib, options.ballast_mb);
  std::printf("%-28s %12s %12s %12s %14s %14s %16s %18s\n", "case", "spawn_us_p50", "spawn_us_p90",
              "spawn_ms_all", "keeper_uss_kb", "keeper_pte_kb", "keepers_pss_mb", "pss_after_cow_mb");
  for (const Row& row : run(options, ballast)) {
    double total = 0;
    for (const double us : row.spawn_us) total += us;
    std::printf("%-28s %12.0f %12.0f %12.1f %14.0f %14.0f %16.1f %18.1f\n", row.name.c_str(),
                percentile(row.spawn_us, 0.5), percentile(row.spawn_us, 0.9), total / 1000.0, row.keeper_uss_kib,
                row.keeper_pte_kib, row.keeper_pss_kib / 1024.0, row.keeper_pss_after_kib / 1024.0);
  }
  return 0;
}
