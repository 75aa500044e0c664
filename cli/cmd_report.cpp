// dtrain report [RUN_DIR|JOB_ID]: writes the job's report page (report.html in its run directory) from what the
// directory holds; the launcher writes the same page when a job ends. No argument: the newest job under ./runs.
// A tune directory's page is its baseline run's with a Tuning section (cli/report/tuning.h).

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/controller/observe/run_dirs.h"
#include "cli/report/report.h"
#include "cli/report/tuning.h"

namespace dtrain::cli {

Action add_report_command(CLI::App& app) {
  auto target = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("report", "write a job's report page (report.html in its run directory)");
  cmd->add_option("job", *target, "the job's directory or its id under ./runs (default: the newest job there)");
  return [target] {
    // A tune directory (`dtrain tune`; cli/report/tuning.h) is one even without an event log of its own.
    const auto dir = !target->empty() && report::is_tune_dir(*target) ? Result<std::string>{{}, *target}
                                                                       : controller::find_run_dir(*target, "report");
    if (!dir.ok()) {
      std::fprintf(stderr, "dtrain report: %s\n", dir.status.message().c_str());
      return 1;
    }
    const auto page = report::write_report(dir.value);
    if (!page.ok()) {
      std::fprintf(stderr, "dtrain report: %s\n", page.status.message().c_str());
      // A run directory holding what no launcher writes (a FIFO, a device, an oversized file) is bad input.
      return page.status.code() == StatusCode::invalid_argument ? 2 : 1;
    }
    std::printf("%s\n", page.value.c_str());
    return 0;
  };
}

}  // namespace dtrain::cli
