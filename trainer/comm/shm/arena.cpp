#include "trainer/comm/shm/arena.h"

#include <fcntl.h>

#include <cstring>
#include <string>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {
namespace {

constexpr std::size_t kArenaPage = 4096;

}  // namespace

Arena::Arena(int fd, std::byte* base, std::size_t offset, std::size_t bytes)
    : fd_(fd), base_(base), offset_(offset), bytes_(bytes / kArenaPage * kArenaPage) {
  if (bytes_ > 0) free_[offset_] = bytes_;
}

void* Arena::allocate(std::size_t bytes) {
  const std::size_t size = (bytes + kArenaPage - 1) / kArenaPage * kArenaPage;
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const std::size_t at = it->first;
    const int reserved = ::posix_fallocate(fd_, static_cast<off_t>(at), static_cast<off_t>(size));
    if (reserved != 0) {
      throw CommError("shm communicator: cannot reserve " + std::to_string(size >> 10) + " KiB in /dev/shm for a "
                      "buffer: " + std::strerror(reserved) + ". /dev/shm is full or too small (df -h /dev/shm; in a "
                      "container, raise --shm-size), or release buffers first");
    }
    const std::size_t left = it->second - size;
    free_.erase(it);
    if (left > 0) free_[at + size] = left;
    used_[at] = size;
    return base_ + at;
  }
  throw CommError("shm communicator: its arena of " + std::to_string(bytes_ >> 20) + " MiB per rank has no room for " +
                  std::to_string(size >> 10) + " KiB more (" + std::to_string(in_use_locked() >> 20) +
                  " MiB in use); release buffers, or allocate fewer");
}

bool Arena::release(void* data) {
  const auto* p = static_cast<const std::byte*>(data);
  std::lock_guard lock(mutex_);
  if (p < base_) return false;
  const auto used = used_.find(static_cast<std::size_t>(p - base_));
  if (used == used_.end()) return false;
  auto [at, size] = *used;
  used_.erase(used);
  // The pages go back to /dev/shm; the address range stays in the arena.
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(at), static_cast<off_t>(size));
  auto next = free_.lower_bound(at);
  if (next != free_.end() && next->first == at + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      prev->second += size;
      return true;
    }
  }
  free_[at] = size;
  return true;
}

std::size_t Arena::in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_locked();
}

std::size_t Arena::in_use_locked() const {
  std::size_t total = 0;
  for (const auto& [at, size] : used_) total += size;
  return total;
}

}  // namespace dtrain::trainer
