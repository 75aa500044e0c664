#pragma once

// GlooCommunicator's state, private to comm/gloo/: its collectives (communicator.cpp) and its point-to-point send()
// and recv() (p2p.cpp) share it.

#include <gloo/rendezvous/context.h>
#include <pthread.h>
#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trainer/comm/gloo/communicator.h"
#include "trainer/comm/trace.h"
#include "trainer/comm/work_queue.h"

namespace dtrain::trainer {

// An element type of the ring reduce-scatter: its size and its sum (gloo's reduce-function signature; out may alias
// a or b).
struct GlooRingSum {
  std::size_t element_bytes;
  void (*add)(void* out, const void* a, const void* b, std::size_t n);
};

// The first failure of a communicator, collective or point-to-point: after it the gloo context cannot be trusted
// (gloo closes every connection of the context when one wait times out), so every later operation fails at once
// with it. The Works of send() and recv() hold it too: they may finish after the communicator is gone.
class GlooFailure {
 public:
  // Records `why` unless a failure came first; returns the first.
  std::string record(const std::string& why) {
    std::lock_guard lock(mutex_);
    if (first_.empty()) first_ = why;
    return first_;
  }
  // The first failure; empty while there is none.
  std::string first() const {
    std::lock_guard lock(mutex_);
    return first_;
  }

 private:
  mutable std::mutex mutex_;
  std::string first_;
};

// A write to a socket whose peer is gone raises SIGPIPE, which kills the process by default, and gloo writes with
// writev (no MSG_NOSIGNAL). While this is alive, SIGPIPE is blocked on the calling thread, and threads started
// meanwhile inherit that: the communicator's queue thread and gloo's event-loop thread, which write to its sockets,
// so a dead peer surfaces as EPIPE, a CommError. send() and recv() hold one while they post, since gloo writes the
// first bytes of a posted operation on the posting thread. On the way out, a SIGPIPE raised on this thread meanwhile
// is consumed before the old mask comes back.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    if (!sigismember(&old_, SIGPIPE)) {
      const timespec now{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

struct GlooCommunicator::Impl {
  GlooCommOptions options;
  std::string endpoint;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::shared_ptr<GlooFailure> failure = std::make_shared<GlooFailure>();
  uint32_t next_tag = 0;       // used on the queue's thread only
  // reduce_scatter's receive and partial-sum buffers, bytes of any element type; the queue's thread only.
  std::vector<std::byte> scratch;
  // Point-to-point: the tag of the next send() to each peer and of the next recv() from each peer, per stream
  // (indexed by stream * size + rank; empty until the first). The training thread issues them while collectives run
  // on the queue's thread.
  std::mutex p2p_mutex;
  std::vector<uint32_t> send_tags;
  std::vector<uint32_t> recv_tags;
  // Last member: destroyed first, so its thread has finished before the context goes.
  CollectiveTrace trace{"gloo communicator"};
  WorkQueue queue{&trace};

  // Queues `run` and turns a gloo failure into a CommError that names the collective, the rank and what to check.
  std::shared_ptr<Work> submit(std::string what, std::function<void(uint32_t tag)> run);
  // Queues a reduce-scatter of `n` elements per rank (sum.element_bytes each) from in to out under `what`.
  std::shared_ptr<Work> reduce_scatter(std::string what, const void* in, void* out, std::size_t n, GlooRingSum sum);
  void ring_reduce_scatter(const std::byte* in, std::byte* out, std::size_t n, GlooRingSum sum, uint32_t tag);
  // send() (sending) and recv() (p2p.cpp): checks `peer`, numbers the message and posts it on the calling thread.
  std::shared_ptr<Work> point_to_point(bool sending, float* data, std::size_t count, int peer, int stream);
};

}  // namespace dtrain::trainer
