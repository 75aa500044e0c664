// --log-dir: a finished job's per-rank logs laid out as torchrun 1.13 lays them out (torchrun_options.h).

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "cli/run/torchrun_options.h"

namespace dtrain::cli::run {

namespace fs = std::filesystem;

std::string write_torchrun_logs(const std::string& job_dir, const std::string& job_id, const std::string& log_dir,
                                int redirects, int nproc, int first_rank) {
  std::error_code ec;
  // torchrun names its directory <run id>_<8 random characters> (tempfile.mkdtemp under log_dir).
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  std::random_device rd;
  std::string suffix;
  for (int i = 0; i < 8; ++i) suffix += alphabet[rd() % (sizeof alphabet - 1)];
  const fs::path run = fs::path(log_dir) / (job_id + "_" + suffix);
  bool any = false;
  for (const auto& attempt : fs::directory_iterator(job_dir, ec)) {
    const std::string name = attempt.path().filename().string();
    if (!attempt.is_directory() || name.rfind("attempt_", 0) != 0) continue;
    for (int local = 0; local < nproc; ++local) {
      const int rank = first_rank + local;
      const fs::path dir = run / name / std::to_string(local);
      fs::create_directories(dir, ec);
      if (ec) return "cannot create " + dir.string() + ": " + ec.message();
      any = true;
      // A failed rank's error file, where torchrun's TORCHELASTIC_ERROR_FILE would have put it.
      const fs::path error = attempt.path() / ("rank_" + std::to_string(rank) + "_error.json");
      if (fs::exists(error, ec)) {
        fs::copy_file(error, dir / "error.json", fs::copy_options::overwrite_existing, ec);
        if (ec) return "cannot copy " + error.string() + ": " + ec.message();
      }
      const fs::path src = attempt.path() / ("rank_" + std::to_string(rank) + ".log");
      if (redirects == 0 || !fs::exists(src, ec)) continue;
      const fs::path dst = dir / ((redirects & 1) ? "stdout.log" : "stderr.log");
      fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
      if (ec) return "cannot copy " + src.string() + " to " + dst.string() + ": " + ec.message();
      if (redirects == 3) std::ofstream(dir / "stderr.log").close();  // both streams are in stdout.log
    }
  }
  if (!any) return "no attempt_<n> directory under " + job_dir;
  return "";
}

void lay_out_torchrun_logs(const Resolved& r, const std::string& job_dir, const std::string& job_id, int first_rank) {
  if (auto why = write_torchrun_logs(job_dir, job_id, r.log_dir, r.redirects, r.nproc, first_rank); !why.empty()) {
    std::fprintf(stderr, "dtrain run: --log-dir %s: %s (dtrain's own logs are in %s)\n", r.log_dir.c_str(),
                 why.c_str(), job_dir.c_str());
  }
}

std::set<std::string> job_dirs(const std::string& dir, const std::string& prefix) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.is_directory(ec)) out.insert(name);
  }
  return out;
}

}  // namespace dtrain::cli::run
