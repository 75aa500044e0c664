#pragma once
// The state behind a Supervisor (supervisor.h), private to agent/supervisor/. Everything here lives on the
// supervisor's thread except `running`, which any thread reads. Its work is split by concept:
//   supervisor.cpp         the public face: checks, the thread and its loop, posting work to it, shutdown
//   supervisor_start.cpp   forking keepers and turning each spec into a watched Worker (or an exited event)
//   supervisor_output.cpp  reading workers' pipes into line events, and forgetting a worker once all is read
//   supervisor_exits.cpp   reaping: worker exits from keeper records, waitpid or pidfds, and the keepers themselves
//   supervisor_stop.cpp    stop_all and shutdown: the sweep, its timer, and the pipes' last bytes

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent/supervisor/event_loop.h"
#include "agent/supervisor/output/output_capture.h"
#include "agent/supervisor/process/pid_namespace.h"
#include "agent/supervisor/process/spawn.h"
#include "agent/supervisor/stop_sweep.h"
#include "agent/supervisor/supervisor.h"

namespace dtrain::supervisor {

inline void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

struct Supervisor::Impl {
  using Clock = std::chrono::steady_clock;
  using Stream = OutputCapture::Stream;

  // Bytes read from one pipe per wakeup, so one chatty worker cannot starve the others.
  static constexpr std::size_t kReadBudget = 1 << 20;
  // Bytes read from a pipe when its worker exited or the sweep ended: everything buffered, but bounded in case a
  // surviving descendant keeps writing.
  static constexpr std::size_t kDrainBudget = 64 << 20;

  // One started worker. Kept after it is reaped while a descendant still holds its pipes open.
  struct Worker {
    std::uint64_t id = 0;
    pid_t pid = 0;
    Clock::time_point started_at;
    std::unique_ptr<OutputCapture> output;
    EventLoop::Token tokens[2] = {0, 0};  // stdout, stderr watches
    pid_t keeper = 0;                     // the worker's keeper (keeper.h), which reports its exit
    int keeper_fd = -1;                   // the keeper's records; closed at the exit record or the keeper's EOF
    EventLoop::Token keeper_token = 0;
    // Only when the keeper died without reporting the worker, which is then our child: readable at its exit.
    int pidfd = -1;
    EventLoop::Token pidfd_token = 0;
    int report_fd = -1;                   // exec verdict still pending when spawn() stopped waiting
    std::unique_ptr<LaunchPlan> plan;     // for describing that late verdict
    bool exit_reported = false;
  };

  // A spec whose keeper is forked and whose worker's start is not known yet.
  struct PendingStart {
    const ProcessSpec* spec = nullptr;
    std::unique_ptr<LaunchPlan> plan;
    int log_fd = -1;
    ForkedKeeper keeper;
  };

  // Unreaped keepers: pid -> their worker's serial (0: none, its spawn failed). Never signalled by a stop: each
  // exits by itself once its tree is empty, after the worker's exit record.
  struct KeeperWatch {
    std::uint64_t serial = 0;
    int pidfd = -1;  // readable at the keeper's exit, even if its SIGCHLD went to another thread
    EventLoop::Token token = 0;
  };

  Impl(Events e, Options o) : events(std::move(e)), options(o), stop(getpid()) {}

  // supervisor.cpp
  void run();
  // supervisor_start.cpp
  void start_all(const std::vector<ProcessSpec>& specs, std::size_t& begun);
  std::optional<PendingStart> begin_start(const ProcessSpec& spec);
  void finish_start(PendingStart& start);
  void report_spawn_failure(const ProcessSpec& spec, pid_t pid, std::string error);
  // supervisor_output.cpp
  OutputCapture::LineSink sink_for(std::uint64_t id);
  void on_output(std::uint64_t serial, Stream stream);
  void drain(Worker& worker, std::size_t budget);
  void forget_if_done(std::uint64_t serial);
  // supervisor_exits.cpp
  void reap_children();
  void on_worker_exited(std::uint64_t serial);
  void on_keeper_record(std::uint64_t serial);
  void track_keeper(pid_t keeper, std::uint64_t serial);
  void on_keeper_exited(pid_t keeper);
  void keeper_reaped(pid_t keeper);
  void on_worker_exit(std::uint64_t serial, int exit_code, int signal);
  // supervisor_stop.cpp
  void begin_stop(std::chrono::milliseconds grace, std::function<void(unsigned)> done);
  void advance_stop();
  void finish_stop();
  void arm_timer(Clock::time_point deadline);
  void begin_shutdown();
  // supervisor.cpp: the PID namespace (Options::pid_namespace): made when workers are spawned and none exists, ended
  // when a stop has left nothing in it (so an idle agent holds no process but itself), made again if its holder died.
  void ensure_namespace();
  void end_namespace();
  bool holder_reaped(pid_t pid);

  Events events;
  Options options;
  PidNamespace ns;           // inactive without Options::pid_namespace or the privilege for it
  std::string containment;   // Supervisor::containment()
  EventLoop loop;
  int signal_fd = -1;
  int timer_fd = -1;
  StopSweep stop;
  std::map<std::uint64_t, std::unique_ptr<Worker>> workers;  // by serial (pids are recycled, serials are not)
  std::unordered_map<pid_t, std::uint64_t> live;             // workers whose exit is not known: pid -> serial
  std::unordered_map<pid_t, KeeperWatch> keepers;
  std::uint64_t next_serial = 1;
  std::atomic<std::size_t> running{0};
  bool shutting_down = false;
  Clock::time_point shutdown_deadline{};
  bool quit = false;
  std::thread thread;
};

}  // namespace dtrain::supervisor
