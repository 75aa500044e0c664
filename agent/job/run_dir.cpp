#include "agent/job/run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "agent/security/identity.h"
#include "common/io/bounded_file.h"
#include "common/os/state_dir.h"
#include "common/os/syscalls.h"

namespace dtrain::agent {
namespace fs = std::filesystem;
namespace {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Creates (if missing) and opens directory `name` under `parent` without following a symlink.
Result<Fd> open_subdirectory(const Fd& parent, const std::string& name, const std::string& shown,
                             const std::string& what) {
  if (::mkdirat(parent.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
    return {{StatusCode::internal, "cannot create " + shown + " for " + what + ": " + errno_text()}};
  }
  Fd fd(::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    const bool link = errno == ELOOP || errno == ENOTDIR;
    return {{link ? StatusCode::invalid_argument : StatusCode::internal,
             shown + (link ? " is a symlink or not a directory" : " cannot be opened: " + errno_text()) +
                 "; the agent keeps " + what + " in real directories under its run directory only"}};
  }
  return {{}, std::move(fd)};
}

}  // namespace

std::string default_run_dir() { return (fs::path(state_dir()) / "runs").string(); }

Result<JobFiles> JobFiles::for_job(std::string run_dir, std::string job_id) {
  if (!security::is_valid_job_id(job_id)) {
    return {{StatusCode::invalid_argument, "job id \"" + job_id + "\" cannot name a directory: a job id is 1 to 128 "
                                           "characters of [A-Za-z0-9._-]"}};
  }
  JobFiles files;
  files.job_id_ = std::move(job_id);
  files.run_dir_ = fs::absolute(run_dir).lexically_normal().string();
  if (files.run_dir_.size() > 1 && files.run_dir_.back() == '/') files.run_dir_.pop_back();
  files.dir_ = files.run_dir_ + "/" + files.job_id_;
  return {{}, std::move(files)};
}

Result<std::string> JobFiles::place(const std::string& name, const std::string& what) const {
  const std::string hint = "; an agent writes a job's logs and error files under <run dir>/<job id> only (here " +
                           dir_ + ", --run-dir sets the run dir); name them relative to it, like attempt_0/rank_0.log";
  fs::path relative = fs::path(name);
  if (relative.is_absolute()) relative = relative.lexically_normal().lexically_relative(dir_);
  std::vector<std::string> parts;
  for (const auto& part : relative) parts.push_back(part.string());
  bool inside = !name.empty() && !parts.empty();
  for (const auto& part : parts) inside = inside && !part.empty() && part != "." && part != ".." && part != "/";
  if (!inside) return {{StatusCode::invalid_argument, what + " '" + name + "' is outside this job's directory" + hint}};

  std::error_code error;
  fs::create_directories(run_dir_, error);
  Fd dir(::open(run_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) {
    return {{StatusCode::internal, "cannot use the run directory " + run_dir_ + " for " + what + ": " +
                                       errno_text() + " (--run-dir sets another)"}};
  }
  Result<Fd> job_dir = open_subdirectory(dir, job_id_, dir_, what);
  if (!job_dir.ok()) return {job_dir.status};
  dir = std::move(job_dir.value);
  std::string shown = dir_;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    shown += "/" + parts[i];
    Result<Fd> sub = open_subdirectory(dir, parts[i], shown, what);
    if (!sub.ok()) return {sub.status};
    dir = std::move(sub.value);
  }
  struct stat st {};
  if (::fstatat(dir.get(), parts.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
    return {{StatusCode::invalid_argument,
             what + " " + shown + "/" + parts.back() + " exists and is not a regular file (a symlink?)" + hint}};
  }
  return {{}, shown + "/" + parts.back()};
}

Result<std::string> read_placed_file(const std::string& path, std::size_t limit) {
  // A symlink is refused rather than followed: a worker may plant one to read what it may not.
  Result<std::string> text = read_bounded_file(path, FileBound{limit, true, false});
  if (text.status.code() == StatusCode::not_found) return {};
  return text;
}

}  // namespace dtrain::agent
