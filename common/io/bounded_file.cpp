#include "common/io/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace dtrain {
namespace {

// Reads at a time when streaming lines: large enough that a 1 GB log takes few system calls.
constexpr std::size_t kReadChunk = 1 << 20;

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a plain file";
}

Status not_regular(const std::string& path, mode_t mode) {
  return {StatusCode::invalid_argument, path + " is " + kind_of(mode) + ", not a regular file"};
}

Status open_error(const std::string& path, int error, bool follow_symlinks) {
  if (error == ENOENT) return {StatusCode::not_found, "cannot read " + path + ": " + std::strerror(error)};
  if (error == EACCES || error == EPERM) {
    return {StatusCode::permission_denied, "cannot read " + path + ": " + std::strerror(error)};
  }
  if (error == ELOOP && !follow_symlinks) return {StatusCode::invalid_argument, path + " is a symlink"};
  return {StatusCode::internal, "cannot read " + path + ": " + std::strerror(error)};
}

// An open descriptor of the regular file `path`, or why there is none. The type is checked before the open (a
// device is never opened: opening some has side effects) and again on the descriptor (the name may have been
// replaced in between).
Result<int> open_regular(const std::string& path, bool follow_symlinks, struct stat& st) {
  if ((follow_symlinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) {
    return {open_error(path, errno, follow_symlinks)};
  }
  if (!S_ISREG(st.st_mode)) return {not_regular(path, st.st_mode)};
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return {open_error(path, errno, follow_symlinks)};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return {not_regular(path, st.st_mode)};
  }
  return {{}, fd};
}

}  // namespace

Result<std::string> read_bounded_file(const std::string& path, const FileBound& bound) {
  struct stat st {};
  const Result<int> fd = open_regular(path, bound.follow_symlinks, st);
  if (!fd.ok()) return {fd.status};
  const auto too_large = [&](std::size_t size) {
    return Status(StatusCode::invalid_argument, path + " is " + std::to_string(size) + " bytes, more than the " +
                                                    std::to_string(bound.max_bytes) + " read here");
  };
  if (!bound.truncate && static_cast<std::size_t>(st.st_size) > bound.max_bytes) {
    ::close(fd.value);
    return {too_large(static_cast<std::size_t>(st.st_size))};
  }
  // Room for the size fstat saw and one byte more, which tells a file that grew since from one that did not; a file
  // that grew is read on, still no further than one byte past the bound.
  const std::size_t limit = bound.max_bytes + 1;
  std::string text(std::min(static_cast<std::size_t>(st.st_size) + 1, limit), '\0');
  std::size_t got = 0;
  int error = 0;
  while (got < limit) {
    if (got == text.size()) text.resize(std::min(2 * text.size(), limit));
    const ssize_t n = ::read(fd.value, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd.value);
  if (error != 0) return {{StatusCode::internal, "cannot read " + path + ": " + std::strerror(error)}};
  if (got > bound.max_bytes && !bound.truncate) return {too_large(got)};
  text.resize(std::min(got, bound.max_bytes));
  return {{}, std::move(text)};
}

LineReader::LineReader(LineReader&& other) noexcept { *this = std::move(other); }

LineReader& LineReader::operator=(LineReader&& other) noexcept {
  std::swap(fd_, other.fd_);
  std::swap(path_, other.path_);
  std::swap(max_line_, other.max_line_);
  std::swap(buffer_, other.buffer_);
  std::swap(begin_, other.begin_);
  std::swap(eof_, other.eof_);
  std::swap(long_lines_, other.long_lines_);
  std::swap(status_, other.status_);
  return *this;
}

LineReader::~LineReader() {
  if (fd_ >= 0) ::close(fd_);
}

Result<LineReader> LineReader::open(const std::string& path, std::size_t max_line) {
  struct stat st {};
  const Result<int> fd = open_regular(path, true, st);
  if (!fd.ok()) return {fd.status};
  LineReader reader;
  reader.fd_ = fd.value;
  reader.path_ = path;
  reader.max_line_ = max_line;
  return {{}, std::move(reader)};
}

// Appends up to kReadChunk bytes to the buffer, first dropping what was consumed; false at the end or on an error.
bool LineReader::fill() {
  if (eof_) return false;
  buffer_.erase(0, begin_);
  begin_ = 0;
  const std::size_t old = buffer_.size();
  buffer_.resize(old + kReadChunk);
  ssize_t n = 0;
  do {
    n = ::read(fd_, buffer_.data() + old, kReadChunk);
  } while (n < 0 && errno == EINTR);
  if (n < 0) status_ = Status(StatusCode::internal, "cannot read " + path_ + ": " + std::strerror(errno));
  buffer_.resize(old + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  eof_ = n <= 0;
  return n > 0;
}

bool LineReader::next(std::string& line) {
  bool skipping = false;  // inside a line longer than max_line: its bytes are dropped as they arrive
  while (true) {
    const std::size_t end = buffer_.find('\n', begin_);
    if (end != std::string::npos) {
      const std::size_t length = end - begin_;
      if (skipping || length > max_line_) {
        ++long_lines_;
        skipping = false;
        begin_ = end + 1;
        continue;
      }
      line.assign(buffer_, begin_, length);
      begin_ = end + 1;
      return true;
    }
    if (buffer_.size() - begin_ > max_line_) {
      skipping = true;
      begin_ = buffer_.size();
    }
    if (!fill()) break;
  }
  // The last line without a '\n'.
  if (begin_ >= buffer_.size()) {
    if (skipping) ++long_lines_;
    return false;
  }
  if (skipping || buffer_.size() - begin_ > max_line_) {
    ++long_lines_;
    begin_ = buffer_.size();
    return false;
  }
  line.assign(buffer_, begin_, buffer_.size() - begin_);
  begin_ = buffer_.size();
  return true;
}

}  // namespace dtrain
