#pragma once

// The last collectives a communicator ran, for the evidence of a hang (issue: "which rank never entered collective
// #N"), in the spirit of PyTorch's NCCL flight recorder: per collective its sequence number on this communicator,
// what it was ("allreduce of 262144 floats"), and when it was issued, started and finished (0 = not yet). Ranks
// issue the same collectives in the same order, so sequence numbers line up across ranks: the rank whose last
// issued number is below the others' never entered the collective the others wait in.
//
// Written by the issuing thread (issue) and the communicator's queue thread (started, finished); read from a signal
// handler (write_trace), so nothing here takes a lock or allocates after construction: each slot is a seqlock of
// atomics, and a reader that races a writer skips that slot rather than printing a torn line.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::trainer {

// Where a trace stands: the last sequence numbers issued, started and finished (0 = none yet), and what the oldest
// unfinished collective is ("" when every issued one finished).
struct TraceSummary {
  std::uint64_t issued = 0;
  std::uint64_t started = 0;
  std::uint64_t finished = 0;
  std::string pending;
};

class CollectiveTrace {
 public:
  // The issue's 2,000, as PyTorch's recorder keeps by default (TORCH_NCCL_TRACE_BUFFER_SIZE).
  static constexpr std::size_t kCapacity = 2000;
  // "what" is cut to this many bytes: enough for "reduce_scatter of 1048576 16-bit values per rank".
  static constexpr std::size_t kWhatBytes = 64;

  // `name` says which communicator this is in the dump ("gloo rank 3 of 8").
  explicit CollectiveTrace(std::string name);
  ~CollectiveTrace();
  CollectiveTrace(const CollectiveTrace&) = delete;
  CollectiveTrace& operator=(const CollectiveTrace&) = delete;

  // Returns the collective's sequence number (1, 2, ...).
  std::uint64_t issue(const std::string& what);
  void started(std::uint64_t seq);
  void finished(std::uint64_t seq);

  TraceSummary summary() const;
  // Writes the header and every recorded collective, oldest first, one line each, to fd with write(2) only
  // (async-signal-safe):
  //   collectives of gloo rank 3 of 8: issued 1842, started 1841, finished 1841
  //   #1842 allreduce of 262144 floats: issued at 1234.567 s, not started
  // Times are CLOCK_MONOTONIC seconds, comparable across the processes of one node.
  void write_to(int fd) const;

 private:
  struct Slot {
    std::atomic<std::uint64_t> version{0};   // odd while being written
    std::atomic<std::uint64_t> seq{0};
    std::atomic<std::int64_t> issued_us{0};
    std::atomic<std::int64_t> started_us{0};
    std::atomic<std::int64_t> finished_us{0};
    std::atomic<char> what[kWhatBytes] = {};
  };
  Slot& slot(std::uint64_t seq) { return slots_[(seq - 1) % kCapacity]; }
  const Slot& slot(std::uint64_t seq) const { return slots_[(seq - 1) % kCapacity]; }

  std::string name_;
  std::vector<Slot> slots_;
  std::atomic<std::uint64_t> issued_{0};
  std::atomic<std::uint64_t> started_{0};
  std::atomic<std::uint64_t> finished_{0};
};

// A line built on the stack and written whole with write(2): no allocation, so a signal handler can use it (here
// and in trainer/health/stack_dump.cpp). Longer text is cut at 255 bytes; write_to adds the '\n'.
class SignalSafeLine {
 public:
  SignalSafeLine& text(const char* s);
  SignalSafeLine& number(std::uint64_t value);
  // Microseconds as seconds with three decimals: "12.345 s".
  SignalSafeLine& seconds(std::int64_t us);
  void write_to(int fd);

 private:
  char buffer_[256];
  std::size_t used_ = 0;
};

// Every trace alive in this process (at most kMaxTraces; more are not listed), for a signal handler to dump:
// traces register themselves on construction and leave on destruction (a communicator lives until the process
// ends, so a dump does not race a trace going away in practice).
inline constexpr std::size_t kMaxTraces = 8;
// Writes every live trace to fd (async-signal-safe).
void write_all_traces(int fd);

}  // namespace dtrain::trainer
