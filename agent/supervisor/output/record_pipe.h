#pragma once
// Reading one fixed-size record from a pipe that a forked child writes (a keeper's first record, an exec failure,
// the PID namespace holder's report), waiting at most until a deadline: the one loop of poll, read and EINTR they
// all need.

#include <chrono>
#include <cstddef>

namespace dtrain::supervisor {

struct RecordRead {
  enum class Outcome {
    kComplete,  // all `size` bytes arrived
    kTimeout,   // the deadline passed first (or poll failed)
    kEnded,     // EOF or a read error first: the writer is gone; `got` says how much had come
  } outcome;
  std::size_t got = 0;
};

// Reads `size` bytes into `data` from `fd` (blocking or not), waiting until `deadline` at most.
RecordRead read_record(int fd, void* data, std::size_t size, std::chrono::steady_clock::time_point deadline);

}  // namespace dtrain::supervisor
