#pragma once

// A file that appears complete or not at all: bytes go to a temporary file beside the target
// ("<path>.tmp.<pid>"), commit() fsyncs it, renames it over the target and fsyncs the directory, so a crash at any
// moment leaves either the old file or the whole new one, never a prefix. Without commit() (an exception, an early
// return) the destructor removes the temporary file.

#include <cstddef>
#include <stdexcept>
#include <string>

#include "trainer/common/unique_fd.h"

namespace dtrain::trainer {

// A checkpoint or state file that cannot be written or read. The message names the file and what to check.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class AtomicFile {
 public:
  // Creates the temporary file; throws CheckpointError if the directory is not writable.
  explicit AtomicFile(std::string path);
  ~AtomicFile();

  void write(const void* data, std::size_t bytes);
  // Makes the file visible under its path, durably. Throws CheckpointError on any failure (the target is then
  // untouched).
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const std::string& what);

  std::string path_;
  std::string temp_path_;
  UniqueFd fd_;  // the temporary file, until commit() or a failure closes it
  bool committed_ = false;
};

}  // namespace dtrain::trainer
