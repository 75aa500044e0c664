#pragma once
// One worker's stdout and stderr: non-blocking pipe reads, cut into lines, appended to its log file, with the
// last stderr lines kept for the exit report.
//
// The log file receives exactly the bytes the worker wrote, stream by stream: a '\n' is written only where the
// worker wrote one (pieces of an over-long line and a last line without '\n' are not terminated), and stdout and
// stderr are interleaved a line at a time in the order they were read. Only the line view (the sink: console,
// stderr tail) is cut into pieces. A write that fails (a full disk, a removed file system) is reported once through
// `on_log_failure` the moment it happens; writing stops there, so the file holds a clean prefix, and every byte
// not written is counted (log_bytes_lost) for the exit report.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/supervisor/output/line_splitter.h"
#include "common/status.h"

namespace dtrain::supervisor {

// Opens (creating parent directories) a log file for appending. Returns the fd, or fails with internal saying which
// directory or file and why.
Result<int> open_log_file(const std::string& path);

class OutputCapture {
 public:
  using LineSink = std::function<void(bool is_stderr, std::string_view line)>;
  using LogFailure = std::function<void(const std::string& message)>;
  enum class Stream { kStdout = 0, kStderr = 1 };
  enum class ReadResult { kOpen, kEof };  // kOpen: nothing more right now (EAGAIN) or the byte budget was used

  // Takes ownership of all three descriptors (log_fd may be -1: no file).
  OutputCapture(int stdout_fd, int stderr_fd, int log_fd, std::string log_path, std::size_t stderr_tail_lines,
                LogFailure on_log_failure = {});
  ~OutputCapture();
  OutputCapture(const OutputCapture&) = delete;
  OutputCapture& operator=(const OutputCapture&) = delete;

  // Reads what the pipe holds, up to about `max_bytes`, delivering each complete line to `sink` and to the log
  // file (written once per call). At EOF the partial last line is delivered too and the pipe is closed.
  ReadResult read(Stream stream, std::size_t max_bytes, const LineSink& sink);
  // Delivers partial last lines of both streams now (the worker exited; later bytes start a new line).
  void flush_partial(const LineSink& sink);
  void close(Stream stream);
  bool is_open(Stream stream) const { return fds_[index(stream)] >= 0; }
  int fd(Stream stream) const { return fds_[index(stream)]; }
  std::vector<std::string> stderr_tail() const { return {tail_.begin(), tail_.end()}; }
  // Why the log file stopped being written ("" while all is well), and how many bytes did not reach it since.
  const std::string& log_error() const { return log_error_; }
  std::uint64_t log_bytes_lost() const { return log_bytes_lost_; }

 private:
  static std::size_t index(Stream stream) { return static_cast<std::size_t>(stream); }
  void deliver(Stream stream, std::string_view text, bool ends_line, const LineSink& sink);
  void write_log();

  int fds_[2];
  LineSplitter splitters_[2];
  int log_fd_;
  std::string log_path_;
  std::string log_batch_;  // lines of the current read, written to the log in one go
  std::size_t tail_limit_;
  std::deque<std::string> tail_;
  LogFailure on_log_failure_;
  std::string log_error_;
  std::uint64_t log_bytes_lost_ = 0;
};

}  // namespace dtrain::supervisor
