#pragma once

// Reading a file that a user named (a job spec, a saved topology, a run directory's status.json and events.jsonl,
// the cluster secret) without trusting what the name leads to. The file is opened with O_NONBLOCK, so a FIFO with
// no writer does not block the open, then refused unless fstat says it is a regular file: a FIFO, a directory, a
// socket or a device such as /dev/zero (which never ends) get a clear error instead of a hang or a read that grows
// until memory runs out. A regular file larger than the caller's bound is refused too (or cut, where a prefix is
// useful); a file that grows while it is read is still read no further than bound + 1 bytes.
//
// Errors name the path and say what it is ("... is a FIFO, not a regular file"); the caller adds what the file is
// for and what to do.

#include <cstddef>
#include <string>

#include "common/status.h"

namespace dtrain {

// How a file is opened and how much of it is read.
struct FileBound {
  std::size_t max_bytes = 0;    // a larger file is refused (or cut to this many bytes with `truncate`)
  bool truncate = false;        // read the first max_bytes instead of refusing a larger file
  bool follow_symlinks = true;  // false: a symlink is refused (O_NOFOLLOW), for files another user may plant
};

// The whole of `path`, at most bound.max_bytes. Status: not_found when it does not exist; invalid_argument when it
// is not a regular file or is larger than the bound; permission_denied; internal for another open or read error.
Result<std::string> read_bounded_file(const std::string& path, const FileBound& bound);

// A regular file read line by line, holding one line at a time: for logs that are too long to read whole (a long
// job's events.jsonl is hundreds of MB). A line longer than max_line is skipped whole, without being held.
class LineReader {
 public:
  LineReader() = default;
  LineReader(LineReader&& other) noexcept;
  LineReader& operator=(LineReader&& other) noexcept;
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader();

  // Opens `path` with the checks of read_bounded_file (a regular file of any size); the same Status codes.
  static Result<LineReader> open(const std::string& path, std::size_t max_line);

  // The next line, without its '\n' (the last line may lack one); false at the end of the file or on a read error
  // (status() says which).
  bool next(std::string& line);

  // Lines skipped because they were longer than max_line.
  std::size_t long_lines() const { return long_lines_; }
  // Not ok after a read error.
  const Status& status() const { return status_; }

 private:
  bool fill();

  int fd_ = -1;
  std::string path_;
  std::size_t max_line_ = 0;
  std::string buffer_;     // read ahead, from buffer_[begin_]
  std::size_t begin_ = 0;
  bool eof_ = false;
  std::size_t long_lines_ = 0;
  Status status_;
};

}  // namespace dtrain
