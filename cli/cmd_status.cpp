// `dtrain status [RUN_DIR|JOB_ID] [--json] [--watch]`: a job's ranks and diagnoses, live from its launcher's control
// socket while it runs, else from the last snapshot it wrote (status.json). No argument: the newest job under
// ./runs.

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/controller/observe/control_socket.h"
#include "cli/controller/observe/job_monitor.h"
#include "cli/controller/observe/run_dirs.h"
#include "cli/controller/observe/status_view.h"
#include "cli/report/model/run_model.h"
#include "common/io/bounded_file.h"
#include "common/clock.h"

namespace dtrain::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The launcher answers within ControlSocket::kFreshWait + kClientBudget of a connection (it serves clients side by
// side); twice that leaves room for a launcher whose loop is slow.
constexpr std::chrono::milliseconds kAnswerTimeout{
    2 * (controller::ControlSocket::kFreshWait + controller::ControlSocket::kClientBudget)};
// --watch: as often as the launcher refreshes what it serves (JobMonitor::kEvaluateInterval).
constexpr std::chrono::milliseconds kWatchInterval = controller::JobMonitor::kEvaluateInterval;

// "14:02:11, 95 s ago": a time of the launcher's clock (Unix ms) as people read it; "an unknown time" for anything
// that is not one.
std::string when_text(const Json& unix_ms_field) {
  if (!unix_ms_field.is_number_unsigned()) return "an unknown time";
  const auto ms = unix_ms_field.get<std::uint64_t>();
  const auto seconds = static_cast<std::time_t>(ms / 1000);
  std::tm local{};
  char clock[16] = "?";
  if (::localtime_r(&seconds, &local) != nullptr) std::strftime(clock, sizeof clock, "%H:%M:%S", &local);
  const std::uint64_t now = unix_ms();
  return std::string(clock) + (now >= ms ? ", " + std::to_string((now - ms) / 1000) + " s ago" : "");
}

// What the launcher's answer (or its absence) means for a snapshot: a note, and `stale` when no launcher will write
// this run's status again.
void explain(const Status& live, Json& snapshot, std::string& note) {
  if (live.ok()) {
    // The launcher runs but its disk is full (or the directory went away): the file lags behind what is shown here.
    const Json error = snapshot.value("status_file_error", Json());
    if (error.is_object() && error.value("message", Json()).is_string()) {
      note = "live; " + std::string(controller::kStatusFileName) + " is stale: the launcher " +
             error["message"].get<std::string>() + " (since " + when_text(error.value("since_unix_ms", Json())) +
             ")";
    }
    return;
  }
  const std::string written = "this is its last snapshot, written " +
                              when_text(snapshot.value("updated_unix_ms", Json()));
  switch (live.code()) {
    case StatusCode::permission_denied:
    case StatusCode::deadline_exceeded:
      // The launcher is alive: the file will be written again, --watch goes on reading it.
      note = live.message() + "; " + written;
      return;
    default:
      // A launcher that ended wrote the end: the file is the whole story.
      if (snapshot.value("state", Json()) != "running") return;
      snapshot["stale"] = true;
      note = "the launcher is gone (" + live.message() + ") without writing the job's end: it was killed, or could "
             "not write " + controller::kStatusFileName + " (a full disk: it warned on its terminal); " + written;
  }
}

// The live snapshot, else the last one written; `note` says which and why.
Result<Json> load(const std::string& dir, std::string& note) {
  note.clear();
  auto live = controller::read_control_socket(dir, kAnswerTimeout);
  if (live.ok()) {
    Json j = Json::parse(live.value, nullptr, false);
    if (j.is_object()) {
      explain(live.status, j, note);
      return {{}, std::move(j)};
    }
  }
  const auto file = read_bounded_file((fs::path(dir) / controller::kStatusFileName).string(),
                                      FileBound{report::kMaxStatusFileBytes});
  // A FIFO, a device or an oversized file is refused as bad input (exit 2), not taken for a job without status.
  if (file.status.code() == StatusCode::invalid_argument) {
    return {{StatusCode::invalid_argument, file.status.message() + ": a launcher writes a job's last snapshot " +
                                               "there as a JSON file; pass the directory of a dtrain job"}};
  }
  Json j = Json::parse(file.value, nullptr, false);
  if (!file.ok() || !j.is_object()) {
    return {{StatusCode::not_found, "no status in " + dir + ": " + live.status.message() + ", and " +
                                        controller::kStatusFileName + " is missing or unreadable"}};
  }
  explain(live.ok() ? Status{StatusCode::internal, "its answer is not a snapshot"} : live.status, j, note);
  return {{}, std::move(j)};
}

}  // namespace

Action add_status_command(CLI::App& app) {
  struct Args {
    std::string target;
    bool json = false;
    bool watch = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("status", "A job's ranks (step, time, data wait, communication, memory) and "
                                           "diagnoses, live or from its last snapshot");
  cmd->add_option("job", args->target, "the job's directory or its id under ./runs (default: the newest job there)");
  cmd->add_flag("--json", args->json, "print the snapshot as JSON");
  cmd->add_flag("--watch", args->watch, "refresh every second until the job ends");
  return [args]() {
    const auto dir = controller::find_run_dir(args->target, "status");
    if (!dir.ok()) {
      std::fprintf(stderr, "dtrain status: %s\n", dir.status.message().c_str());
      return 2;
    }
    // A terminal that cannot move the cursor (TERM=dumb, as in editors' shells) gets the plain text a pipe gets.
    if (args->json && !args->watch) {
      // The live snapshot is JSON already: printed as the launcher wrote it, once checked, instead of parsed into a
      // tree and dumped again (a second or more at 32,768 ranks). What is not a whole JSON object takes the path
      // below, which says why.
      auto live = controller::read_control_socket(dir.value, kAnswerTimeout);
      if (live.ok() && !live.value.empty() && live.value.front() == '{' && Json::accept(live.value)) {
        if (live.value.back() != '\n') live.value += '\n';
        std::fwrite(live.value.data(), 1, live.value.size(), stdout);
        std::fflush(stdout);
        return 0;
      }
    }
    const char* term = std::getenv("TERM");
    const bool terminal = ::isatty(STDOUT_FILENO) == 1 && !(term != nullptr && std::string(term) == "dumb");
    for (bool first = true;; first = false) {
      std::string note;
      const auto snapshot = load(dir.value, note);
      if (!snapshot.ok()) {
        std::fprintf(stderr, "dtrain status: %s\n", snapshot.status.message().c_str());
        return snapshot.status.code() == StatusCode::invalid_argument ? 2 : 1;
      }
      std::string text = args->json ? snapshot.value.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"
                                     : controller::render_status(snapshot.value, note, {terminal});
      // In place on a terminal; one block after another into a file or a pipe.
      if (args->watch && terminal) text = controller::in_place_frame(text, first);
      else if (args->watch && !first) text = "\n" + text;
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      if (!args->watch || snapshot.value.value("state", "") != "running" || snapshot.value.contains("stale")) return 0;
      std::this_thread::sleep_for(kWatchInterval);
    }
  };
}

}  // namespace dtrain::cli
