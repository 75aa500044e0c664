#include "trainer/ckpt/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace dtrain::trainer {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_.reset(::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd_.valid()) {
    throw CheckpointError("cannot create " + temp_path_ + " (" + std::strerror(errno) +
                          "); check that the checkpoint directory exists and is writable");
  }
}

AtomicFile::~AtomicFile() {
  fd_.reset();
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::fail(const std::string& what) {
  std::string message = what + " " + temp_path_ + " failed (" + std::strerror(errno) + ") while writing " + path_ +
                        "; check free space and the file system";
  fd_.reset();
  throw CheckpointError(message);
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (!fd_.valid()) throw CheckpointError("write to " + path_ + " after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t put = ::write(fd_.get(), p, bytes);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) fail("write to");
    p += put;
    bytes -= static_cast<std::size_t>(put);
  }
}

void AtomicFile::commit() {
  if (!fd_.valid()) throw CheckpointError("commit of " + path_ + " after commit or failure");
  if (::fsync(fd_.get()) != 0) fail("fsync of");
  if (fd_.close() != 0) fail("close of");
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail("rename of");
  committed_ = true;
  // The rename is durable only once the directory entry is.
  std::string dir = std::filesystem::path(path_).parent_path().string();
  const UniqueFd dir_fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.valid()) ::fsync(dir_fd.get());
}

}  // namespace dtrain::trainer
