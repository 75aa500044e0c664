#include "cli/controller/observe/run_dirs.h"

#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/controller/observe/job_monitor.h"
#include "common/io/bounded_file.h"

namespace dtrain::controller {
namespace {

namespace fs = std::filesystem;

bool is_run_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kEventsFileName, ec) || fs::exists(dir / kStatusFileName, ec);
}

// The first line of an event log is job_start, a few hundred bytes.
constexpr std::size_t kMaxFirstLine = 64 * 1024;

// When the job started, from its event log's first line (job_start); 0 when it cannot be read (a FIFO or a device
// where the log should be is not read at all: it could block or never end).
std::uint64_t started_ms(const fs::path& dir) {
  Result<LineReader> log = LineReader::open((dir / kEventsFileName).string(), kMaxFirstLine);
  std::string line;
  if (!log.ok() || !log.value.next(line)) return 0;
  const auto first = nlohmann::json::parse(line, nullptr, false);
  const auto ts = first.is_object() ? first.find("ts") : first.end();
  return ts != first.end() && ts->is_number_unsigned() ? ts->get<std::uint64_t>() : 0;
}

}  // namespace

Result<std::string> find_run_dir(const std::string& target, const std::string& command, const std::string& runs_dir) {
  const fs::path runs = runs_dir;
  if (target.empty()) {
    std::error_code ec;
    fs::path newest;
    std::uint64_t newest_ms = 0;
    for (const auto& entry : fs::directory_iterator(runs, ec)) {
      if (!entry.is_directory() || !is_run_dir(entry.path())) continue;
      const std::uint64_t ms = started_ms(entry.path());
      if (newest.empty() || ms > newest_ms) {
        newest = entry.path();
        newest_ms = ms;
      }
    }
    if (newest.empty()) {
      return {{StatusCode::not_found, "no job under " + fs::absolute(runs).string() + ": run it where `dtrain " +
                                          "launch` ran (logs.dir: " + kRunsDir + "), or name the job's directory: " +
                                          "dtrain " + command + " RUN_DIR"}};
    }
    return {{}, newest.string()};
  }
  if (is_run_dir(target)) return {{}, target};
  if (is_run_dir(runs / target)) return {{}, (runs / target).string()};
  return {{StatusCode::not_found, target + " is neither a job's directory (one with " + kEventsFileName +
                                      ") nor a job id under " + runs.string() + ": pass the directory the launcher " +
                                      "printed, or run `dtrain " + command + "` where it ran"}};
}

}  // namespace dtrain::controller
