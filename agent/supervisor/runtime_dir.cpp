#include "agent/supervisor/runtime_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace dtrain::supervisor {
namespace {

constexpr const char* kPrefix = "agent-";

std::string reason() { return std::strerror(errno); }

// Opens `dir` for locking; refuses symlinks.
int open_dir(const std::string& dir) { return open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }

// flock with a deadline (flock itself has none).
bool lock_within(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Creates `base` 0700 if missing and opens it, after checking it is ours alone. Returns the open descriptor.
int open_private_base(const std::string& base) {
  if (mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create the agent's runtime directory " + base + ": " + reason() +
                             " (set XDG_RUNTIME_DIR or TMPDIR to a writable directory)");
  }
  const int fd = open_dir(base);
  if (fd < 0) {
    throw std::runtime_error("cannot open the agent's runtime directory " + base + ": " + reason() +
                             (errno == ELOOP || errno == ENOTDIR ? " (it must be a directory, not a symlink)" : ""));
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw std::runtime_error("the agent's runtime directory " + base + " is not private to this user (owner uid " +
                             std::to_string(st.st_uid) + ", mode " + mode + "; expected uid " +
                             std::to_string(geteuid()) + ", mode 0700): another user could read the workers' keys "
                             "there. Remove it, or set XDG_RUNTIME_DIR to a directory only you can access");
  }
  return fd;
}

// Removes every agent-* directory under `base` that no process holds locked. The caller holds base's lock, so no
// agent is between creating its directory and locking it.
std::vector<std::string> sweep(const std::string& base) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    const int fd = open_dir(entry.path().string());
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code remove_error;
      std::filesystem::remove_all(entry.path(), remove_error);
      if (!remove_error) removed.push_back(entry.path().string());
    }
    close(fd);
  }
  return removed;
}

}  // namespace

std::string RuntimeDir::default_base() {
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && xdg[0] == '/') {
    struct stat st{};
    if (stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid()) return std::string(xdg) + "/dtrain";
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string tmp_dir = tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp";
  return tmp_dir + "/dtrain-" + std::to_string(geteuid());
}

RuntimeDir RuntimeDir::create(const std::string& base) {
  const int base_fd = open_private_base(base);
  if (!lock_within(base_fd, kLockTimeout)) {
    const std::string why = reason();
    close(base_fd);
    throw std::runtime_error("cannot lock the agent's runtime directory " + base + " within " +
                             std::to_string(kLockTimeout.count()) + " s: " + why +
                             " (another dtrain agent is holding it; check `fuser -v " + base + "`)");
  }
  std::vector<std::string> swept = sweep(base);
  std::string pattern = base + "/" + kPrefix + std::to_string(getpid()) + "-XXXXXX";
  int lock_fd = -1;
  std::string error;
  if (mkdtemp(pattern.data()) == nullptr) {
    error = "cannot create a directory in " + base + ": " + reason();
  } else if ((lock_fd = open_dir(pattern)) < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    error = "cannot lock " + pattern + ": " + reason();
  }
  close(base_fd);  // unlocks base: others may sweep now, and see this directory locked
  if (!error.empty()) {
    if (lock_fd >= 0) close(lock_fd);
    throw std::runtime_error(error);
  }
  return RuntimeDir(pattern, lock_fd, std::move(swept));
}

RuntimeDir::RuntimeDir(RuntimeDir&& other) noexcept
    : path_(std::move(other.path_)), lock_fd_(other.lock_fd_), swept_(std::move(other.swept_)) {
  other.lock_fd_ = -1;
  other.path_.clear();
}

RuntimeDir& RuntimeDir::operator=(RuntimeDir&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    lock_fd_ = other.lock_fd_;
    swept_ = std::move(other.swept_);
    other.lock_fd_ = -1;
    other.path_.clear();
  }
  return *this;
}

RuntimeDir::~RuntimeDir() { release(); }

void RuntimeDir::release() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
  path_.clear();
}

std::string RuntimeDir::make_subdir(const std::string& name) const {
  const std::string dir = path_ + "/" + name;
  if (mkdir(dir.c_str(), 0700) != 0) throw std::runtime_error("cannot create " + dir + ": " + reason());
  return dir;
}

}  // namespace dtrain::supervisor
