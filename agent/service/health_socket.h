#pragma once

// Health reports over a Unix datagram socket, for workers that have no gRPC (worker/python/dtrain_health.py: a PyTorch
// script with nothing but the standard library). One datagram is one small JSON object:
//
//   {"rank": 3, "token": DTRAIN_JOB_TOKEN, "report_token": DTRAIN_REPORT_TOKEN, "step": 41, "steps_done": 41,
//    "loss": 2.31, "tokens_per_s": 5120.0, "samples_per_s": 10.0, "rss_bytes": 812345344, "step_ms": 95.2,
//    "data_wait_ms": 3.1, "compute_ms": 80.0, "comm_exposed_ms": 12.1, "device_mem_used_bytes": 2147483648,
//    "device_mem_peak_bytes": 1610612736, "phase": "forward", "dump_signal": 12,
//    "points": [[39, 2.35, 96.0, 5080.0], [40, 2.33, 94.8, 5130.5], [41, 2.31, 95.2, 5120.0]]}
//
// "points" are the steps completed since the sender's previous datagram, oldest first, each [step, loss, step_ms,
// tokens_per_s] (report.proto's StepPoint; the step an integer, the rest numbers, 0: not known): at most
// kMaxStepPoints (64), steps increasing, losses finite, step_ms and tokens_per_s not negative
// (check_report_values). A heartbeat that repeats the last step sends none (or leaves the key out). Over 64 steps
// since the last datagram, send the first, the last and the lowest and highest loss of even groups between
// (common/report/step_points.h: thin_points).
//
// and, in the last report of a process that has finished and is exiting, "exiting": true (a JSON boolean); in a
// report sent as the process enters a call that keeps its reporter from running (report.proto), "quiet": true.
//
// The field names are WorkerReport's (report.proto). rank is required, and the tokens (a datagram without them is
// refused by the token check); every other field is optional (absent: 0, as in a gRPC report), and
// fields this agent does not know are ignored. The socket is one per agent, in the agent's private runtime
// directory (0700): only this user's processes reach it, and the round's tokens tie each datagram to a round and a
// rank exactly as the gRPC metadata does (the caller's Sink checks them). The kernel tells the sender's pid
// (SO_PASSCRED), which is how the agent knows that a dump signal was announced by the worker process itself.
//
// A datagram that is not JSON, not an object, over kMaxHealthDatagram, has a field of the wrong type, or that the
// Sink refuses (a wrong token, a value out of bounds) is dropped and counted; the first drop of each kind and every
// kLogEvery-th after it are logged. Nothing a worker sends can stop the receiver.

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/report/step_points.h"
#include "common/status.h"
#include "dtrain/v1/report.pb.h"

namespace dtrain::agent {

// The largest datagram read: a report is a few hundred bytes, and 64 points at most 64 x 90 bytes (four numbers of
// 17 significant digits each, as Python's json writes a float); a phase of 128 bytes, escaped, fits beside them.
inline constexpr std::size_t kMaxHealthDatagram = 16384;

// One datagram, parsed.
struct HealthDatagram {
  std::string token;          // the round's DTRAIN_JOB_TOKEN
  std::string report_token;   // the rank's DTRAIN_REPORT_TOKEN
  v1::WorkerReport report;   // dump_signal included: the signal on which it writes its Python stacks (0: none)
  pid_t sender = 0;          // the sending process, as the kernel tells it (0 where it did not)
};

// The datagram's report, or invalid_argument naming what is wrong with it (not JSON, not an object, a missing
// rank or token, a field of the wrong type or sign). Values are not checked here: check_report_values does that.
Result<HealthDatagram> parse_health_datagram(std::string_view bytes);

class HealthSocket {
 public:
  // Gets each parsed datagram on the receiver's thread, or on drain()'s caller's, one at a time; a failure drops it
  // (counted, logged as `refused`, or as `other_process` when it is failed_precondition).
  using Sink = std::function<Status(const HealthDatagram&)>;

  enum class Drop {
    malformed,   // not a report (parse_health_datagram refused it)
    oversized,   // over kMaxHealthDatagram
    refused,     // the Sink refused it: wrong token, not a worker of this round, a value out of bounds
    other_process,   // the Sink refused it as failed_precondition: sent by a process that is not the rank's worker
  };
  // The first drop of each kind is logged, then every kLogEvery-th: a worker that sends garbage in a loop must not
  // flood the agent's log.
  static constexpr std::uint64_t kLogEvery = 1000;
  // The most datagrams one pass reads (the receiver's, or drain()'s) before it lets go of the socket. Far more than
  // the kernel queues (net.unix.max_dgram_qlen, 10 by default, before senders wait), so a drain takes all of it.
  static constexpr std::size_t kMaxBatch = 512;

  // Binds a datagram socket at `path` (removing a stale one there) and starts the receiver. Throws
  // std::runtime_error naming the path when it cannot (too long for a socket address, a directory not writable).
  HealthSocket(std::string path, Sink sink);
  HealthSocket(const HealthSocket&) = delete;
  HealthSocket& operator=(const HealthSocket&) = delete;
  // Stops the receiver and removes the socket file.
  ~HealthSocket();

  const std::string& path() const { return path_; }
  // Takes the datagrams queued on the socket now (up to kMaxBatch), and returns once each was handed to the Sink,
  // including those the receiver's thread is handing over at the call. The agent calls it before it says a worker
  // exited: the report a worker sent just before it died (its last step, on SIGTERM) is in the queue by then, and
  // must reach the launcher ahead of the exit, not after the job has ended.
  void drain();
  // Datagrams accepted by the Sink, and dropped of each kind, so far.
  std::uint64_t accepted() const { return accepted_.load(); }
  std::uint64_t dropped(Drop kind) const { return dropped_[static_cast<std::size_t>(kind)].load(); }

 private:
  void run();
  void receive_queued();   // with receiving_ held
  void take(std::string_view bytes, bool truncated, pid_t sender);
  void drop(Drop kind, const std::string& why);

  std::string path_;
  Sink sink_;
  int fd_ = -1;
  int stop_fd_ = -1;   // an eventfd: written once to end run()
  std::atomic<std::uint64_t> accepted_{0};
  std::array<std::atomic<std::uint64_t>, 4> dropped_{};
  std::mutex receiving_;   // held while datagrams are read and handed to the Sink: by run() and by drain()
  std::array<char, kMaxHealthDatagram + 1> buffer_{};   // under receiving_
  std::thread thread_;
};

}  // namespace dtrain::agent
