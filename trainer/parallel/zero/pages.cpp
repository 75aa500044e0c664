#include "trainer/parallel/zero/pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dtrain::trainer {

namespace {

void release_bytes(void* data, std::size_t bytes) {
  if (bytes == 0) return;
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t end = begin + bytes;
  const std::uintptr_t first = (begin + page - 1) / page * page;
  const std::uintptr_t last = end / page * page;
  if (first >= last) {
    std::memset(data, 0, bytes);
    return;
  }
  std::memset(data, 0, first - begin);
  std::memset(reinterpret_cast<void*>(last), 0, end - last);
  void* pages = reinterpret_cast<void*>(first);
  if (madvise(pages, last - first, MADV_REMOVE) == 0) return;
  if (errno != EINVAL || madvise(pages, last - first, MADV_DONTNEED) != 0) {
    throw std::runtime_error("ZeRO: releasing " + std::to_string(last - first) + " bytes with madvise failed (" +
                             std::strerror(errno) + "); the buffer must be host memory");
  }
}

template <typename T>
void release_outside_of(T* base, std::size_t begin, std::size_t end, std::size_t keep_begin, std::size_t keep_end) {
  if (keep_begin < begin || keep_end > end || keep_begin > keep_end)
    throw std::logic_error("release_outside: kept range [" + std::to_string(keep_begin) + ", " +
                           std::to_string(keep_end) + ") is not inside [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ")");
  release_range(base + begin, keep_begin - begin);
  release_range(base + keep_end, end - keep_end);
}

}  // namespace

void release_range(float* data, std::size_t count) { release_bytes(data, count * sizeof(float)); }
void release_range(std::uint16_t* data, std::size_t count) { release_bytes(data, count * sizeof(std::uint16_t)); }

void release_outside(float* base, std::size_t begin, std::size_t end, std::size_t keep_begin, std::size_t keep_end) {
  release_outside_of(base, begin, end, keep_begin, keep_end);
}

void release_outside(std::uint16_t* base, std::size_t begin, std::size_t end, std::size_t keep_begin,
                     std::size_t keep_end) {
  release_outside_of(base, begin, end, keep_begin, keep_end);
}

}  // namespace dtrain::trainer
