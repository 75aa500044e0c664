#pragma once

// A rank's arena in the shm segment: the buffers Communicator::allocate returns. A collective on such a buffer
// needs no staging copy: the peers read and write it where it is (shm/pipeline.h). First fit over page-aligned
// blocks; a block's pages are reserved in /dev/shm when it is handed out (so a full /dev/shm is a CommError here,
// not a SIGBUS later) and given back when it is released. Only this rank allocates in its arena; thread-safe.

#include <cstddef>
#include <map>
#include <mutex>

namespace dtrain::trainer {

class Arena {
 public:
  // The arena is [offset, offset + bytes) of the segment open as `fd` and mapped at `base`.
  Arena(int fd, std::byte* base, std::size_t offset, std::size_t bytes);

  // A page-aligned block of at least `bytes`; throws CommError when the arena or /dev/shm has no room.
  void* allocate(std::size_t bytes);
  // Gives a block back; false when `data` is not a block of this arena (nothing changes then).
  bool release(void* data);
  // Bytes handed out and not released.
  std::size_t in_use() const;

 private:
  std::size_t in_use_locked() const;

  int fd_;
  std::byte* base_;
  std::size_t offset_;
  std::size_t bytes_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_;  // segment offset -> bytes; neighbours merged
  std::map<std::size_t, std::size_t> used_;  // segment offset -> bytes
};

}  // namespace dtrain::trainer
