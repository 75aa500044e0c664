#include "agent/supervisor/output/record_pipe.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace dtrain::supervisor {

RecordRead read_record(int fd, void* data, std::size_t size, std::chrono::steady_clock::time_point deadline) {
  std::size_t got = 0;
  while (got < size) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return {RecordRead::Outcome::kTimeout, got};
    const ssize_t n = read(fd, static_cast<char*>(data) + got, size - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return {RecordRead::Outcome::kEnded, got};
    got += static_cast<std::size_t>(n);
  }
  return {RecordRead::Outcome::kComplete, got};
}

}  // namespace dtrain::supervisor
