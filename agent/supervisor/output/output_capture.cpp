#include "agent/supervisor/output/output_capture.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dtrain::supervisor {
namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

}  // namespace

Result<int> open_log_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return {{StatusCode::internal, "cannot create log directory '" + parent.string() + "': " + ec.message()}};
  // O_NOFOLLOW: a symlink planted where a log goes (by a worker of an earlier round) is refused, not followed.
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return {{StatusCode::internal, "cannot open log file '" + path + "': " + std::strerror(errno)}};
  return {{}, fd};
}

OutputCapture::OutputCapture(int stdout_fd, int stderr_fd, int log_fd, std::string log_path,
                             std::size_t stderr_tail_lines, LogFailure on_log_failure)
    : fds_{stdout_fd, stderr_fd},
      log_fd_(log_fd),
      log_path_(std::move(log_path)),
      tail_limit_(stderr_tail_lines),
      on_log_failure_(std::move(on_log_failure)) {}

OutputCapture::~OutputCapture() {
  close(Stream::kStdout);
  close(Stream::kStderr);
  if (log_fd_ >= 0) ::close(log_fd_);
}

void OutputCapture::close(Stream stream) {
  int& fd = fds_[index(stream)];
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void OutputCapture::deliver(Stream stream, std::string_view line, bool ends_line, const LineSink& sink) {
  const bool is_stderr = stream == Stream::kStderr;
  if (log_fd_ >= 0) {
    log_batch_.append(line);
    if (ends_line) log_batch_.push_back('\n');
  } else if (!log_error_.empty()) {
    log_bytes_lost_ += line.size() + (ends_line ? 1 : 0);
  }
  if (is_stderr && tail_limit_ > 0) {
    if (tail_.size() == tail_limit_) tail_.pop_front();
    tail_.emplace_back(line);
  }
  sink(is_stderr, line);
}

void OutputCapture::write_log() {
  std::string_view rest = log_batch_;
  while (log_fd_ >= 0 && !rest.empty()) {
    const ssize_t n = ::write(log_fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Say it once and stop writing (the pipes are still drained): a clean prefix is better than a file with gaps.
      log_error_ = "cannot append to log file '" + log_path_ + "': " + std::strerror(n < 0 ? errno : ENOSPC);
      ::close(log_fd_);
      log_fd_ = -1;
      log_bytes_lost_ += rest.size();
      if (on_log_failure_) on_log_failure_(log_error_);
      break;
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  log_batch_.clear();
}

OutputCapture::ReadResult OutputCapture::read(Stream stream, std::size_t max_bytes, const LineSink& sink) {
  const int fd = fds_[index(stream)];
  if (fd < 0) return ReadResult::kEof;
  const auto emit = [&](std::string_view line, bool ends_line) { deliver(stream, line, ends_line, sink); };
  char buf[kReadChunk];
  std::size_t total = 0;
  ReadResult result = ReadResult::kOpen;
  while (total < max_bytes) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {  // EOF (or a pipe error, which ends the stream just the same)
      splitters_[index(stream)].finish(emit);
      result = ReadResult::kEof;
      break;
    }
    total += static_cast<std::size_t>(n);
    splitters_[index(stream)].feed(std::string_view(buf, static_cast<std::size_t>(n)), emit);
  }
  write_log();
  if (result == ReadResult::kEof) close(stream);
  return result;
}

void OutputCapture::flush_partial(const LineSink& sink) {
  for (const Stream stream : {Stream::kStdout, Stream::kStderr}) {
    splitters_[index(stream)].finish(
        [&](std::string_view line, bool ends_line) { deliver(stream, line, ends_line, sink); });
  }
  write_log();
}

}  // namespace dtrain::supervisor
