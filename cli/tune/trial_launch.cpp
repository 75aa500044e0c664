// One trial launched with the controller (trial_launch.h).

#include "cli/tune/trial_launch.h"

#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/run/torchrun_options.h"

namespace dtrain::tune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The most of a log read for trial lines: its end, where the trial line is.
constexpr std::uintmax_t kMaxLogTail = 8 << 20;
constexpr std::size_t kMaxTailText = 400;

std::string file_tail(const fs::path& path, std::uintmax_t most) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > most) in.seekg(static_cast<std::streamoff>(size - most));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The launcher's output goes to `path` while it lives; the terminal's is put back after.
class Redirect {
 public:
  explicit Redirect(const fs::path& path) {
    std::fflush(stdout);
    std::fflush(stderr);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    saved_out_ = ::dup(1);
    saved_err_ = ::dup(2);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~Redirect() {
    std::fflush(stdout);
    std::fflush(stderr);
    if (saved_out_ >= 0) ::dup2(saved_out_, 1), ::close(saved_out_);
    if (saved_err_ >= 0) ::dup2(saved_err_, 2), ::close(saved_err_);
  }
  Redirect(const Redirect&) = delete;
  Redirect& operator=(const Redirect&) = delete;

 private:
  int saved_out_ = -1;
  int saved_err_ = -1;
};

// What a failure says: the last worker lines of the capture ("[R] ..."), else the launcher's last notes; joined.
std::string last_lines(const std::string& text) {
  std::vector<std::string> worker, launcher;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.find(kTrialLinePrefix) != std::string::npos) continue;
    if (line[0] == '[') worker.push_back(line);
    else if (line.rfind("dtrain: report:", 0) != 0) launcher.push_back(line);
  }
  const auto& lines = worker.empty() ? launcher : worker;
  std::string out;
  for (std::size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i) {
    out += (out.empty() ? "" : " | ") + lines[i];
  }
  if (out.size() > kMaxTailText) out = "..." + out.substr(out.size() - kMaxTailText);
  return out;
}

void read_ranks(TrialRun& run, const std::string& console) {
  std::map<int, RankTrial> found;
  for (auto& r : find_trial_lines(console)) found[r.rank] = std::move(r);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run.run_dir) / "attempt_0", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank_", 0) != 0 || e.path().extension() != ".log") continue;
    ++run.world;
    for (auto& r : find_trial_lines(file_tail(e.path(), kMaxLogTail))) found[r.rank] = std::move(r);
  }
  for (auto& [rank, trial] : found) run.ranks.push_back(std::move(trial));
}

}  // namespace

void TrialLaunches::signal(int signal) {
  interrupted_ = true;
  std::lock_guard lock(mu_);
  if (current_ != nullptr) current_->signal(signal);
}

TrialRun TrialLaunches::launch(const spec::Spec& spec, Clock::time_point deadline) {
  TrialRun run;
  if (interrupted_) {
    run.interrupted = true;
    return run;
  }
  std::error_code ec;
  fs::create_directories(spec.logs.dir, ec);
  const std::string prefix = spec.name + "-";
  const auto before = cli::run::job_dirs(spec.logs.dir, prefix);
  const fs::path capture = fs::path(spec.logs.dir) / (spec.name + ".console");
  const auto started = Clock::now();
  std::mutex wait_mu;
  std::condition_variable done_cv;
  bool done = false;
  {
    Redirect redirect(capture);
    controller::Controller controller(spec, options_);
    {
      std::lock_guard lock(mu_);
      current_ = &controller;
    }
    std::thread watchdog([&] {
      std::unique_lock lock(wait_mu);
      if (done_cv.wait_until(lock, deadline, [&] { return done; })) return;
      run.stopped = true;
      controller.signal(SIGTERM);
      const auto grace = std::chrono::milliseconds(static_cast<long long>(spec.stop.grace_s * 1e3) + 5000);
      if (!done_cv.wait_for(lock, grace, [&] { return done; })) controller.signal(SIGTERM);
    });
    try {
      run.exit_code = controller.run();
    } catch (const std::exception& e) {
      // The watchdog must be joined either way; the trial is failed with what went wrong.
      run.exit_code = 1;
      std::fprintf(stderr, "dtrain tune: the trial's launcher failed: %s\n", e.what());
    }
    {
      std::lock_guard lock(wait_mu);
      done = true;
    }
    done_cv.notify_all();
    watchdog.join();
    std::lock_guard lock(mu_);
    current_ = nullptr;
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  run.interrupted = interrupted_;
  for (const auto& id : cli::run::job_dirs(spec.logs.dir, prefix)) {
    if (!before.count(id)) run.run_dir = (fs::path(spec.logs.dir) / id).string();
  }
  const std::string console = file_tail(capture, kMaxLogTail);
  if (!run.run_dir.empty()) {
    read_ranks(run, console);
    fs::rename(capture, fs::path(run.run_dir) / "launcher.console", ec);
  }
  run.tail = last_lines(console);
  return run;
}

}  // namespace dtrain::tune
