#include "cli/report/report.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/report/page.h"
#include "cli/report/run_model.h"

namespace dtrain::report {

namespace fs = std::filesystem;

Result<std::string> write_report(const std::string& run_dir) {
  auto model = read_run(run_dir);
  if (!model.ok()) return {model.status};
  const std::string page = render_page(model.value);
  const fs::path path = fs::path(run_dir) / kReportFileName;
  const fs::path temp = fs::path(run_dir) / (std::string(kReportFileName) + ".tmp");
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << page;
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(temp, ec);
      return {{StatusCode::internal, "cannot write " + temp.string() +
                                         ": check that the run directory is writable and its disk has room"}};
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    return {{StatusCode::internal, "cannot rename " + temp.string() + " to " + path.string() + ": " + ec.message()}};
  }
  return {{}, path.string()};
}

namespace {

// When a job started: the ts of its first event (job_start); 0 when unreadable.
std::uint64_t started_ms(const fs::path& dir) {
  std::ifstream in(dir / "events.jsonl");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const auto first = nlohmann::json::parse(line, nullptr, false);
  const auto ts = first.is_object() ? first.find("ts") : first.end();
  return ts != first.end() && ts->is_number_unsigned() ? ts->get<std::uint64_t>() : 0;
}

}  // namespace

Result<std::string> newest_run(const std::string& runs_dir) {
  std::error_code ec;
  fs::path newest;
  std::uint64_t newest_ms = 0;
  for (const auto& entry : fs::directory_iterator(runs_dir, ec)) {
    std::error_code stat_ec;
    if (!fs::is_regular_file(entry.path() / "events.jsonl", stat_ec)) continue;
    const std::uint64_t ms = started_ms(entry.path());
    if (newest.empty() || ms > newest_ms) {
      newest = entry.path();
      newest_ms = ms;
    }
  }
  if (newest.empty()) {
    return {{StatusCode::not_found, "no job under " + fs::absolute(runs_dir).string() +
                                        ": run it where `dtrain launch` ran (logs.dir: runs), or pass the job's "
                                        "directory: dtrain report RUN_DIR"}};
  }
  return {{}, newest.string()};
}

}  // namespace dtrain::report
