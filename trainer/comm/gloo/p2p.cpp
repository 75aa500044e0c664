// GlooCommunicator's send() and recv(): gloo unbound buffers posted on the calling thread, so that a recv() waiting
// for its peer holds back neither the collectives behind it on the queue's thread nor a send() of this rank (a
// pipeline stage sends its activations on while it waits for the next ones).

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "trainer/comm/describe.h"
#include "trainer/comm/finishable_work.h"
#include "trainer/comm/gloo/communicator.h"
#include "trainer/comm/gloo/impl.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// Slot prefix of send() and recv() on stream 0; stream s uses 0x50 + s (up to 0x5f); our ring reduce-scatter uses 0x40,
// gloo's own collectives 0x01..0x08. The tag under it is the message's number on its (peer, direction, stream), so the
// n-th send of a stream to a peer meets that peer's n-th recv of the stream from this rank whatever else is in flight.
constexpr uint8_t kP2pSlotPrefix = 0x50;

// How long a Work destroyed before its message completed gives it a last chance before giving it up.
constexpr std::chrono::milliseconds kGiveUpWait{1};

// A send() or recv() on a communicator that had already failed.
class FailedWork final : public Work {
 public:
  explicit FailedWork(std::string error) : error_(std::move(error)) {}
  void wait() override { throw CommError(error_); }
  bool done() const override { return true; }

 private:
  std::string error_;
};

// One posted send() or recv(). gloo can only block on an unbound buffer, and its one way to stop waiting, a timeout,
// closes every connection of the context; so a thread of the Work's own waits (the communicator's timeout), and
// done() reads what it found.
class P2pWork final : public FinishableWork {
 public:
  // `failed_on`: "gloo send of ... to rank 1 failed on rank 0 of 2 (...)"; `advice`: what to check, after the error.
  P2pWork(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, bool sending, std::string failed_on,
          std::string advice, std::shared_ptr<GlooFailure> failure, std::chrono::milliseconds timeout)
      : buffer_(std::move(buffer)), sending_(sending), failed_on_(std::move(failed_on)), advice_(std::move(advice)),
        failure_(std::move(failure)), timeout_(timeout), posted_(Clock::now()) {}

  // A Work whose message was never waited for to the end gives it up: gloo would otherwise read the peer's message
  // into a buffer that is gone, or keep this one's for a receiver forever, and stall the connection for good.
  ~P2pWork() override {
    if (!done() && waiter_.joinable()) {
      if (sending_) {
        buffer_->abortWaitSend();
      } else {
        buffer_->abortWaitRecv();
      }
    }
    if (waiter_.joinable()) waiter_.join();
    if (!done()) give_up();
  }
  P2pWork(const P2pWork&) = delete;
  P2pWork& operator=(const P2pWork&) = delete;

  // After the message is posted: the waiting thread starts.
  void start() { waiter_ = std::thread([this] { watch(); }); }

  // The message could not be posted.
  void fail(const std::exception& error) {
    const std::string why = failed_on_ + ": " + error.what() + ". " + advice_;
    failure_->record(why);
    end(why);
  }

 private:
  // The waiting thread: completion, a failure (the peer's connection, or the timeout), or the destructor's abort,
  // which leaves the Work unfinished.
  void watch() {
    try {
      const bool completed = sending_ ? buffer_->waitSend(timeout_) : buffer_->waitRecv(timeout_);
      if (completed) end("");
    } catch (const std::exception& error) {
      const std::string why = failed_on_ + ": " + error.what() + ". " + advice_;
      failure_->record(why);
      end(why);
    }
  }

  void end(std::string error) {
    finish(std::move(error), std::chrono::duration<double, std::milli>(Clock::now() - posted_).count());
  }

  // A message gloo still holds: it completes now, or the wait's timeout closes every connection of the context
  // (gloo's way of giving up on a message), and the communicator fails every later operation.
  void give_up() noexcept {
    try {
      if (sending_ ? buffer_->waitSend(kGiveUpWait) : buffer_->waitRecv(kGiveUpWait)) return;
    } catch (...) {
    }
    try {
      failure_->record(failed_on_ + ": its Work was destroyed, without wait(), before the message completed; gloo "
                       "gives a message up only by closing every connection of the communicator. Wait for every "
                       "send() and recv() before dropping its Work");
    } catch (...) {
    }
  }

  const std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  const bool sending_;
  const std::string failed_on_;
  const std::string advice_;
  const std::shared_ptr<GlooFailure> failure_;
  const std::chrono::milliseconds timeout_;
  const Clock::time_point posted_;
  std::thread waiter_;  // last: started by start(), once every other member is in place
};

}  // namespace

std::shared_ptr<Work> GlooCommunicator::Impl::point_to_point(bool sending, float* data, std::size_t count, int peer,
                                                             int stream) {
  const std::string op = sending ? "send of " + describe_floats(count) + " to rank " + std::to_string(peer)
                                 : "recv of " + describe_floats(count) + " from rank " + std::to_string(peer);
  const std::string here = "rank " + std::to_string(options.rank) + " of " + std::to_string(options.size);
  if (peer == options.rank) {
    throw CommError("gloo " + op + " on " + here + ": a rank cannot " + (sending ? "send to" : "receive from") +
                    " itself; the peer must be another rank of this communicator");
  }
  if (peer < 0 || peer >= options.size) {
    throw CommError("gloo " + op + " on " + here + ": rank " + std::to_string(peer) +
                    " is not a rank of this communicator of " + std::to_string(options.size) + " ranks");
  }
  const std::string earlier = failure->first();
  if (!earlier.empty()) {
    return std::make_shared<FailedWork>("gloo " + op + " was not posted on " + here +
                                        ": an earlier operation on this communicator failed: " + earlier);
  }
  if (stream < 0 || stream >= kP2pStreams) {
    throw CommError("gloo " + op + " on " + here + ": stream " + std::to_string(stream) + " is not in [0, " +
                    std::to_string(kP2pStreams) + ")");
  }
  if (count == 0) return done_work();

  uint32_t tag;
  {
    std::lock_guard lock(p2p_mutex);
    auto& tags = sending ? send_tags : recv_tags;
    if (tags.empty()) tags.assign(static_cast<std::size_t>(kP2pStreams) * static_cast<std::size_t>(options.size), 0);
    tag = tags[static_cast<std::size_t>(stream) * static_cast<std::size_t>(options.size) +
               static_cast<std::size_t>(peer)]++;
  }
  const std::string peer_rank = "rank " + std::to_string(peer);
  std::string advice = "The peer stage (" + peer_rank + ") may have exited, or be stuck before its matching " +
                       (sending ? "recv()" : "send()") + ": a peer that exited closes its connection at once; one " +
                       "that stopped answering fails this after the timeout of " + describe_seconds(options.timeout) +
                       ". Check " + peer_rank + "'s log, and that the two ranks' sends and recvs pair up in the same " +
                       "order with the same sizes";
  auto buffer = context->createUnboundBuffer(data, count * sizeof(float));
  gloo::transport::UnboundBuffer& posted = *buffer;
  auto work = std::make_shared<P2pWork>(std::move(buffer), sending,
                                        "gloo " + op + " failed on " + here + " (" + endpoint + ")",
                                        std::move(advice), failure, options.timeout);
  const auto slot = gloo::Slot::build(static_cast<uint8_t>(kP2pSlotPrefix + stream), tag);
  try {
    SigpipeBlocked sigpipe_blocked;  // gloo writes the message's first bytes on this thread
    if (sending) {
      posted.send(peer, slot);
    } else {
      posted.recv(peer, slot);
    }
  } catch (const std::exception& error) {
    work->fail(error);
    return work;
  }
  try {
    work->start();
  } catch (const std::system_error& error) {
    // The Work goes with this exception, and gives its posted message up.
    throw CommError("gloo " + op + " on " + here + ": cannot start the thread that waits for it: " + error.what());
  }
  return work;
}

std::shared_ptr<Work> GlooCommunicator::send(const float* data, std::size_t count, int peer, int stream) {
  // gloo's unbound buffer takes a mutable pointer; a send only reads from it.
  auto work = impl_->point_to_point(true, const_cast<float*>(data), count, peer, stream);
  count_sent(count * sizeof(float));
  return work;
}

std::shared_ptr<Work> GlooCommunicator::recv(float* data, std::size_t count, int peer, int stream) {
  return impl_->point_to_point(false, data, count, peer, stream);
}

}  // namespace dtrain::trainer
