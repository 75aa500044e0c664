// The agent's /proc view of its workers: parse_proc_stat on real and awkward stat lines, sample_process on this
// process (busy, so its CPU time grows) and on a real child that is stopped with SIGSTOP (state T) and then reaped
// (not found), and WorkerSampler sampling a real child it learned of from the runner's events, until it exits.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "agent/session/wire.h"
#include "agent/job/worker_sampler.h"

using namespace dtrain::agent;
using namespace std::chrono_literals;

namespace {

// A child that sleeps until killed; reaped by the destructor.
struct SleepingChild {
  pid_t pid = ::fork();
  SleepingChild() {
    if (pid == 0) {
      for (;;) ::pause();
    }
    REQUIRE(pid > 0);
  }
  ~SleepingChild() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// Waits (at most 5 s: far past a scheduler's delay on a loaded machine) until `pid`'s state is `state`.
bool wait_for_state(pid_t pid, char state) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto sample = sample_process(pid);
    if (sample.ok() && sample.value.state == state) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_CASE("a stat line is read from after the last ')': a command name may hold spaces and parentheses") {
  const long ticks = ::sysconf(_SC_CLK_TCK);
  const std::string utime = std::to_string(3 * ticks), stime = std::to_string(ticks / 2);
  const std::string line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 " + utime + " " + stime +
                           " 0 0 20 0 7 0 12345 1000000 200 18446744073709551615";
  const auto sample = parse_proc_stat(line);
  REQUIRE(sample.ok());
  CHECK(sample.value.state == 'S');
  CHECK(sample.value.cpu_seconds == doctest::Approx(3.5));
  CHECK(sample.value.threads == 7);
}

TEST_CASE("what is not a stat line is invalid_argument, never a crash") {
  for (const char* text : {"", "4242 no parenthesis R 1 2 3", "4242 (short) R 1 2 3",
                           "1 (x) R 1 1 1 0 -1 0 0 0 0 0 utime stime 0 0 20 0 1 0 1 1 1",
                           "1 (x) RS 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 1 1 1"}) {
    CAPTURE(text);
    CHECK(parse_proc_stat(text).status.code() == dtrain::StatusCode::invalid_argument);
  }
}

TEST_CASE("this process: running, its threads counted, its CPU time growing") {
  const auto before = sample_process(::getpid());
  REQUIRE(before.ok());
  CHECK(before.value.state == 'R');   // it is reading its own stat
  std::thread helper([] { std::this_thread::sleep_for(200ms); });
  const auto with_helper = sample_process(::getpid());
  helper.join();
  REQUIRE(with_helper.ok());
  CHECK(with_helper.value.threads >= 2);
  // Busy for a quarter second of this thread's CPU time (on a loaded machine 250 ms of wall time gave it 40 ms), at
  // most 10 s of wall time; the kernel counts in ticks (10 ms at 100 Hz).
  const auto cpu_now = [] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
  };
  const double cpu_until = cpu_now() + 0.25;
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  volatile unsigned long spin = 0;
  while (cpu_now() < cpu_until && std::chrono::steady_clock::now() < give_up) spin = spin + 1;
  const auto after = sample_process(::getpid());
  REQUIRE(after.ok());
  CHECK(after.value.cpu_seconds >= before.value.cpu_seconds + 0.1);
}

TEST_CASE("a child: sleeping, stopped, then gone") {
  pid_t reaped = 0;
  {
    SleepingChild child;
    reaped = child.pid;
    CHECK(wait_for_state(child.pid, 'S'));
    const auto sleeping = sample_process(child.pid);
    REQUIRE(sleeping.ok());
    CHECK(sleeping.value.threads == 1);
    CHECK(sleeping.value.cpu_seconds < 1);
    ::kill(child.pid, SIGSTOP);
    CHECK(wait_for_state(child.pid, 'T'));
  }
  CHECK(sample_process(reaped).status.code() == dtrain::StatusCode::not_found);
}

TEST_CASE("the sampler samples the workers the runner started, and stops when they exit") {
  std::mutex mutex;
  std::condition_variable got;
  std::vector<WorkerSample> samples;
  WorkerSampler sampler(
      [&](const WorkerSample& s) {
        std::lock_guard lock(mutex);
        samples.push_back(s);
        got.notify_all();
      },
      20ms);
  SleepingChild child;
  sampler.observe(WorkerStarted{3, 1, child.pid});
  std::unique_lock lock(mutex);
  REQUIRE(got.wait_for(lock, 5s, [&] { return samples.size() >= 2; }));
  const WorkerSample first = samples.front();
  CHECK(first.round == 3);
  CHECK(first.rank == 1);
  CHECK(first.process.threads == 1);
  CHECK(first.unix_ms > 0);
  const dtrain::v1::AgentMessage message = dtrain::agent::wire::to_wire(first);
  CHECK(message.worker_sample().round() == 3);
  CHECK(message.worker_sample().rank() == 1);
  CHECK(message.worker_sample().state() == std::string(1, first.process.state));
  CHECK(message.worker_sample().threads() == 1);
  CHECK(message.worker_sample().unix_ms() == first.unix_ms);
  WorkerExited exited;
  exited.round = 3;
  exited.rank = 1;
  lock.unlock();
  sampler.observe(exited);
  std::this_thread::sleep_for(100ms);   // a sample already under way may still land
  lock.lock();
  const std::size_t settled = samples.size();
  lock.unlock();
  std::this_thread::sleep_for(200ms);   // ten intervals
  lock.lock();
  CHECK(samples.size() == settled);
}
