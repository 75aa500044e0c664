#include "cli/report/report.h"

#include <filesystem>
#include <fstream>

#include "cli/report/page.h"
#include "cli/report/svg.h"
#include "cli/report/tuning.h"
#include "cli/report/model/run_model.h"

namespace dtrain::report {

namespace fs = std::filesystem;

namespace {

// A tune directory's page: its baseline run's with the Tuning section after the header; the section alone, saying
// why, when that run cannot be read.
Result<std::string> tune_page(const std::string& dir) {
  const auto tune = read_tune(dir);
  if (!tune.ok()) return {tune.status};
  const TuneSummary& t = tune.value;
  const auto baseline = baseline_run_dir(dir, t.baseline_run);
  std::string why;
  if (!baseline.ok()) {
    why = baseline.status.message() + ".";
  } else {
    const auto model = read_run(baseline.value);
    if (model.ok()) return {{}, render_page(model.value, tuning_section(t))};
    why = model.status.code() == StatusCode::not_found
              ? "The baseline run is missing: no event log at " + (fs::path(baseline.value) / "events.jsonl").string()
              : "The baseline run cannot be read: " + model.status.message();
    why += ".";
  }
  why += " This page has the Tuning section only.";
  const std::string job = t.job.empty() ? fs::path(dir).filename().string() : t.job;
  return {{}, render_bare_page("dtrain tune report: " + job,
                               "<header><h1>dtrain tune " + escape(job) + "</h1></header>" + tuning_section(t, why))};
}

}  // namespace

Result<std::string> write_report(const std::string& run_dir) {
  std::string page;
  if (is_tune_dir(run_dir)) {
    auto tune = tune_page(run_dir);
    if (!tune.ok()) return {tune.status};
    page = std::move(tune.value);
  } else {
    auto model = read_run(run_dir);
    if (!model.ok()) return {model.status};
    page = render_page(model.value);
  }
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

}  // namespace dtrain::report
