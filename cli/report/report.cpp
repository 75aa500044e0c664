#include "cli/report/report.h"

#include <filesystem>
#include <fstream>

#include "cli/report/page.h"
#include "cli/report/model/run_model.h"

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

}  // namespace dtrain::report
