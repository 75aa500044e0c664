#include "agent/node/doctor/cpu_gemm_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/os/syscalls.h"

extern char** environ;

namespace dtrain::node::doctor {
namespace {

using GemmClock = std::chrono::steady_clock;

// The trainer's stdout until it closes it or `deadline` passes (then `timed_out`). Its output is one short line.
std::string read_until(int fd, GemmClock::time_point deadline, bool& timed_out) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - GemmClock::now()).count();
    if (left <= 0) {
      timed_out = true;
      return out;
    }
    pollfd watch{fd, POLLIN, 0};
    const int ready = ::poll(&watch, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    if (out.size() < 64 * 1024) out.append(buffer, static_cast<std::size_t>(n));
  }
}

// Its exit in words ("exited with code 1", "was killed by SIGSEGV"), "" for a clean exit.
std::string exit_text(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return WEXITSTATUS(wait_status) == 0 ? "" : "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  }
  const char* name = signal_name(WTERMSIG(wait_status));
  return std::string("was killed by ") + (name != nullptr ? name : "signal " + std::to_string(WTERMSIG(wait_status)));
}

// "45.3 GFLOP/s"
std::string gflops_text(double flops_per_s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GFLOP/s", flops_per_s / 1e9);
  return text;
}

std::string rate_text(const CpuGemmRate& rate) {
  return "fp32 GEMM " + gflops_text(rate.flops_per_s) + " on " + std::to_string(rate.threads) + " threads (" +
         rate.cpu_model + ")";
}

}  // namespace

Result<CpuGemmRate> measure_cpu_gemm(const std::string& trainer, unsigned threads, std::chrono::milliseconds timeout) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return {{StatusCode::unavailable, "cannot create a pipe: " + errno_text()}};
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&files, pipe_fds[1], 1);
  posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
  const std::string thread_text = std::to_string(threads);
  const char* argv[] = {trainer.c_str(), "gemm-rate", "--threads", thread_text.c_str(), nullptr};
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, trainer.c_str(), &files, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&files);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    return {{StatusCode::unavailable, "cannot run " + trainer + ": " + std::strerror(spawned)}};
  }
  bool timed_out = false;
  const std::string out = read_until(pipe_fds[0], GemmClock::now() + timeout, timed_out);
  ::close(pipe_fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return {{StatusCode::deadline_exceeded,
             trainer + " gemm-rate did not finish within " + std::to_string(timeout.count()) + " ms"}};
  }
  if (const std::string how = exit_text(wait_status); !how.empty()) {
    return {{StatusCode::unavailable, trainer + " gemm-rate " + how}};
  }
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  const auto number = [&j](const char* key) {
    const auto it = j.is_object() ? j.find(key) : j.end();
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  if (!(number("flops_per_s") > 0) || !(number("threads") >= 1)) {
    return {{StatusCode::invalid_argument, trainer + " gemm-rate printed no rate: \"" + out.substr(0, 200) + "\""}};
  }
  CpuGemmRate rate;
  rate.flops_per_s = number("flops_per_s");
  rate.threads = static_cast<unsigned>(number("threads"));
  rate.size = static_cast<int>(number("size"));
  rate.cpu_model = cpu_model_name();
  rate.measured_unix_ms = unix_ms();
  return {{}, rate};
}

CpuGemmFinding gather_cpu_gemm(const std::string& trainer) {
  CpuGemmFinding found;
  found.cache_path = default_cpu_gemm_path();
  if (trainer.empty()) {
    Result<CpuGemmRate> cached = read_node_cpu_gemm();
    if (cached.ok()) found.rate = cached.value;
    found.outcome = cached.status;
    return found;
  }
  found.measured = true;
  Result<CpuGemmRate> measured = measure_cpu_gemm(trainer, affinity_cpu_count(), kGemmMeasureTimeout);
  found.outcome = measured.status;
  if (!measured.ok()) return found;
  found.rate = measured.value;
  found.outcome = write_cpu_gemm(found.cache_path, measured.value);
  return found;
}

Finding cpu_gemm_finding(const DoctorInputs& in) {
  const CpuGemmFinding& g = in.cpu_gemm;
  if (g.rate && g.outcome.ok()) {
    return {Status::pass, rate_text(*g.rate) + (g.measured ? ", cached in " : " in ") + g.cache_path +
                              ": the peak of CPU ranks' MFU"};
  }
  if (g.rate) {
    return {Status::warn, rate_text(*g.rate) + ", not cached: " + g.outcome.message(),
            "make " + g.cache_path + "'s directory writable, or set XDG_STATE_HOME to a writable directory"};
  }
  if (!g.measured && (g.outcome.ok() || g.outcome.code() == StatusCode::not_found)) {
    const std::string why = g.outcome.ok() ? "no measured GEMM rate of this node: run `dtrain doctor` on it to "
                                             "measure one" : g.outcome.message();
    return {Status::skip, why + " (CPU ranks' MFU stays unknown)"};
  }
  if (g.measured) {
    return {Status::warn, "could not measure the fp32 GEMM rate: " + g.outcome.message() +
                              " (CPU ranks' MFU stays unknown)",
            "install dtrain-trainer beside dtrain (it measures with the trainer's kernels)"};
  }
  return {Status::warn, g.outcome.message(), "run `dtrain doctor` on this node"};
}

}  // namespace dtrain::node::doctor
