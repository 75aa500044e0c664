#include "trainer/comm/shm/p2p.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <system_error>
#include <utility>

#include "trainer/comm/describe.h"
#include "trainer/comm/finishable_work.h"

namespace dtrain::trainer {

using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kHeaderBytes = sizeof(std::uint64_t);
// As shm/sync.cpp: a peer on another core usually answers within microseconds; beyond this it is busy or not
// scheduled, and spinning would take its CPU.
constexpr auto kSpin = std::chrono::microseconds(50);
// The longest a waiting side sleeps before it looks at its peer's liveness and its message's deadline.
constexpr auto kLivenessPoll = std::chrono::milliseconds(50);
// The sender thread with nothing to send: it is woken by the next queued send anyway.
constexpr auto kIdleSleep = std::chrono::seconds(1);

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Copies n bytes between `buffer` and the ring at its byte `position` (modulo its capacity), wrapping at its end.
void ring_copy(std::byte* ring, std::size_t capacity, std::uint64_t position, std::byte* buffer, std::size_t n,
               bool into_ring) {
  const std::size_t at = static_cast<std::size_t>(position % capacity);
  const std::size_t first = std::min(n, capacity - at);
  if (into_ring) {
    std::memcpy(ring + at, buffer, first);
    std::memcpy(ring, buffer + first, n - first);
  } else {
    std::memcpy(buffer, ring + at, first);
    std::memcpy(buffer + first, ring, n - first);
  }
}

}  // namespace

// A send() or recv() that did not complete when it was posted. A recv's wait() and done() move its ring on.
class ShmP2pWork final : public FinishableWork {
 public:
  ShmP2pWork(std::shared_ptr<ShmP2p> p2p, bool sending, int lane, std::string what)
      : p2p_(std::move(p2p)), sending_(sending), lane_(lane), what_(std::move(what)), posted_(Clock::now()) {}
  // Always through the lock under which every Work is finished: a Work seen done may still be inside finish() on the
  // sender thread, which must return before the Work goes.
  ~ShmP2pWork() override {
    if (p2p_) p2p_->abandon(*this);
  }
  ShmP2pWork(const ShmP2pWork&) = delete;
  ShmP2pWork& operator=(const ShmP2pWork&) = delete;

  void wait() override {
    if (p2p_ && !sending_) p2p_->receive_until(*this);
    FinishableWork::wait();
  }
  bool done() const override {
    if (p2p_ && !sending_ && !FinishableWork::done()) p2p_->poll(const_cast<ShmP2pWork&>(*this));
    return FinishableWork::done();
  }
  bool finished() const { return FinishableWork::done(); }
  void end(std::string error) { finish(std::move(error), ms_since(posted_)); }

  bool sending() const { return sending_; }
  int lane() const { return lane_; }
  const std::string& what() const { return what_; }
  Clock::time_point posted() const { return posted_; }

 private:
  const std::shared_ptr<ShmP2p> p2p_;  // null for a Work finished when it was made
  const bool sending_;
  const int lane_;
  const std::string what_;  // "send of 10 floats (40 B) to rank 1 on stream 0"
  const Clock::time_point posted_;
};

ShmP2p::ShmP2p(Segment& segment, PeerSync& sync, int rank, std::chrono::milliseconds timeout)
    : segment_(segment),
      sync_(sync),
      rank_(rank),
      timeout_(timeout),
      out_(static_cast<std::size_t>(segment.geometry().ranks) * Communicator::kP2pStreams),
      in_(out_.size()) {}

ShmP2p::~ShmP2p() { close(); }

std::string ShmP2p::where() const {
  return "rank " + std::to_string(rank_) + " of " + std::to_string(segment_.geometry().ranks);
}

std::shared_ptr<Work> ShmP2p::send(const float* data, std::size_t count, int peer, int stream) {
  // A send only reads from data.
  return post(true, const_cast<float*>(data), count, peer, stream);
}

std::shared_ptr<Work> ShmP2p::recv(float* data, std::size_t count, int peer, int stream) {
  return post(false, data, count, peer, stream);
}

std::shared_ptr<Work> ShmP2p::post(bool sending, float* data, std::size_t count, int peer, int stream) {
  const int ranks = segment_.geometry().ranks;
  const std::string what = std::string(sending ? "send of " : "recv of ") + describe_floats(count) +
                           (sending ? " to rank " : " from rank ") + std::to_string(peer) + " on stream " +
                           std::to_string(stream);
  if (peer == rank_) {
    throw CommError("shm " + what + " on " + where() + ": a rank cannot " + (sending ? "send to" : "receive from") +
                    " itself; the peer must be another rank of this communicator");
  }
  if (peer < 0 || peer >= ranks) {
    throw CommError("shm " + what + " on " + where() + ": rank " + std::to_string(peer) +
                    " is not a rank of this communicator of " + std::to_string(ranks) + " ranks");
  }
  if (stream < 0 || stream >= Communicator::kP2pStreams) {
    throw CommError("shm " + what + " on " + where() + ": stream " + std::to_string(stream) + " is not in [0, " +
                    std::to_string(Communicator::kP2pStreams) + ")");
  }
  if (count == 0) return done_work();  // pairs with nothing, as on gloo
  const int index = peer * Communicator::kP2pStreams + stream;
  auto work = std::make_shared<ShmP2pWork>(shared_from_this(), sending, index, what);
  std::lock_guard lock(mutex_);
  if (closed_ || !failure_.empty()) {
    work->end("shm " + what + " was not posted on " + where() + ": " +
              (closed_ ? "the communicator was closed" : "an earlier send or recv failed: " + failure_));
    return work;
  }
  Lane& lane = sending ? out_[static_cast<std::size_t>(index)] : in_[static_cast<std::size_t>(index)];
  if (sending && !lane.reserved) {
    const std::size_t bytes = segment_.geometry().ring_bytes;
    const auto offset = static_cast<off_t>(segment_.ring_offset(rank_, peer, stream));
    if (const int error = ::posix_fallocate(segment_.fd(), offset, static_cast<off_t>(bytes)); error != 0) {
      work->end("shm " + what + " failed on " + where() + ": cannot reserve its ring of " + describe_bytes(bytes) +
                " in " + shm_segment_dir() + ": " + std::strerror(error) + ". Give " + shm_segment_dir() +
                " more room, or use DTRAIN_COMM_BACKEND=gloo");
      return work;
    }
    lane.reserved = true;
  }
  lane.queue.push_back(Message{reinterpret_cast<std::byte*>(data), count * sizeof(float), 0,
                               sending ? std::uint64_t{count} : 0, work.get()});
  progress(sending, index);
  if (sending && !lane.queue.empty() && !sender_.joinable()) {
    try {
      sender_ = std::thread([this] { send_loop(); });
    } catch (const std::system_error& error) {
      fail_all("cannot start the thread that sends messages longer than the ring: " + std::string(error.what()));
    }
  }
  if (sending && !lane.queue.empty()) ring_bell(rank_);  // the sender thread takes it from here
  return work;
}

bool ShmP2p::advance(bool sending, int lane_index, Lane& lane, Message& m) {
  const int peer = lane_index / Communicator::kP2pStreams;
  const int stream = lane_index % Communicator::kP2pStreams;
  const int from = sending ? rank_ : peer;
  const int to = sending ? peer : rank_;
  P2pChannel& channel = segment_.channel(from, to, stream);
  std::byte* ring = segment_.base() + segment_.ring_offset(from, to, stream);
  const std::size_t capacity = segment_.geometry().ring_bytes;
  const std::size_t total = kHeaderBytes + m.bytes;
  bool moved = false;
  while (m.moved < total) {
    const auto mine = static_cast<std::uint32_t>(lane.position);
    const std::uint32_t used = sending ? mine - channel.taken.load(std::memory_order_acquire)
                                       : channel.written.load(std::memory_order_acquire) - mine;
    const std::size_t room = sending ? capacity - used : used;
    if (room == 0) break;
    std::size_t n = std::min(room, total - m.moved);
    std::byte* buffer;
    if (m.moved < kHeaderBytes) {
      n = std::min(n, kHeaderBytes - m.moved);
      buffer = reinterpret_cast<std::byte*>(&m.header) + m.moved;
    } else {
      buffer = m.data + (m.moved - kHeaderBytes);
    }
    ring_copy(ring, capacity, lane.position, buffer, n, sending);
    lane.position += n;
    m.moved += n;
    moved = true;
    (sending ? channel.written : channel.taken).store(static_cast<std::uint32_t>(lane.position),
                                                      std::memory_order_release);
    if (!sending && m.moved == kHeaderBytes && m.header != m.bytes / sizeof(float)) {
      ring_bell(peer);
      fail_all(m.work->what() + " failed on " + where() + ": rank " + std::to_string(peer) + " sent " +
                   std::to_string(m.header) +
               " floats on this stream where this recv expects " + std::to_string(m.bytes / sizeof(float)) +
               ". The two ranks' sends and recvs must pair up in the same order with the same sizes",
               m.work);
      return false;
    }
  }
  if (moved) ring_bell(peer);
  return m.moved == total;
}

bool ShmP2p::progress(bool sending, int lane_index) {
  Lane& lane = (sending ? out_ : in_)[static_cast<std::size_t>(lane_index)];
  const std::uint64_t before = lane.position;
  while (!lane.queue.empty() && failure_.empty()) {
    Message& front = lane.queue.front();
    if (!advance(sending, lane_index, lane, front)) break;
    ShmP2pWork* work = front.work;
    lane.queue.pop_front();
    work->end("");
  }
  return lane.position != before;
}

void ShmP2p::check_front(bool sending, int lane_index) {
  Lane& lane = (sending ? out_ : in_)[static_cast<std::size_t>(lane_index)];
  if (lane.queue.empty() || !failure_.empty()) return;
  const int peer = lane_index / Communicator::kP2pStreams;
  const std::string gone = sync_.gone(peer);
  const bool late = Clock::now() - lane.queue.front().work->posted() >= timeout_;
  if (gone.empty() && !late) return;
  progress(sending, lane_index);  // what the peer wrote or took before it went
  if (lane.queue.empty() || !failure_.empty()) return;
  const Message& m = lane.queue.front();
  const std::string peer_rank = "rank " + std::to_string(peer);
  const std::string moved = " (" + std::to_string(m.moved) + " of its " + std::to_string(kHeaderBytes + m.bytes) +
                            " bytes with the header had moved)";
  if (!gone.empty()) {
    fail_all(m.work->what() + " failed on " + where() + ": " + peer_rank + " " + gone + moved + ". Check " +
             peer_rank + "'s log for why it ended",
             m.work);
    return;
  }
  fail_all(m.work->what() + " failed on " + where() + ": " + peer_rank + " did not " +
           (sending ? "take" : "send") + " it within the timeout of " + describe_seconds(timeout_) + moved +
           ". It is alive: stalled, or stuck before its matching " + (sending ? "recv()" : "send()") +
           "; check that the two ranks' sends and recvs pair up in the same order with the same sizes",
           m.work);
}

void ShmP2p::fail_all(const std::string& why, const ShmP2pWork* cause) {
  if (failure_.empty()) failure_ = "shm " + why;
  for (auto* lanes : {&out_, &in_}) {
    for (Lane& lane : *lanes) {
      for (Message& m : lane.queue) {
        m.work->end(m.work == cause ? failure_
                                    : "shm " + m.work->what() + " did not complete on " + where() +
                                          ": an earlier send or recv failed: " + failure_);
      }
      lane.queue.clear();
    }
  }
}

void ShmP2p::receive_until(ShmP2pWork& work) {
  std::unique_lock lock(mutex_);
  while (!work.finished() && !closed_) {
    const std::uint32_t seen = segment_.bell(rank_).rings.load();
    progress(false, work.lane());
    if (work.finished()) return;
    check_front(false, work.lane());
    if (work.finished()) return;
    const auto left = work.posted() + timeout_ - Clock::now();
    lock.unlock();
    sleep_on_bell(seen, std::clamp<Clock::duration>(left, Clock::duration::zero(), kLivenessPoll));
    lock.lock();
  }
}

void ShmP2p::poll(ShmP2pWork& work) {
  std::lock_guard lock(mutex_);
  if (!closed_ && !work.finished()) progress(false, work.lane());
}

void ShmP2p::abandon(ShmP2pWork& work) {
  std::lock_guard lock(mutex_);
  if (work.finished()) return;
  Lane& lane = (work.sending() ? out_ : in_)[static_cast<std::size_t>(work.lane())];
  const auto it = std::find_if(lane.queue.begin(), lane.queue.end(),
                               [&](const Message& m) { return m.work == &work; });
  if (it == lane.queue.end()) return;
  lane.queue.erase(it);  // its buffer is no longer ours to touch
  fail_all(work.what() + " was given up on " + where() + ": its Work was destroyed, without wait(), before the message "
           "completed, so the later messages of its ring would pair with the wrong ones. Wait for every send() and "
           "recv() before dropping its Work");
}

void ShmP2p::send_loop() {
  std::unique_lock lock(mutex_);
  while (!closed_) {
    const std::uint32_t seen = segment_.bell(rank_).rings.load();
    bool pending = false;
    for (int i = 0; i < static_cast<int>(out_.size()); ++i) {
      if (out_[static_cast<std::size_t>(i)].queue.empty()) continue;
      progress(true, i);
      check_front(true, i);
      pending = pending || !out_[static_cast<std::size_t>(i)].queue.empty();
    }
    lock.unlock();
    sleep_on_bell(seen, pending ? Clock::duration(kLivenessPoll) : Clock::duration(kIdleSleep));
    lock.lock();
  }
}

void ShmP2p::sleep_on_bell(std::uint32_t seen, Clock::duration limit) {
  P2pBell& bell = segment_.bell(rank_);
  const auto spin_until = Clock::now() + std::min<Clock::duration>(kSpin, limit);
  for (unsigned i = 1;; ++i) {
    relax();
    if (bell.rings.load(std::memory_order_acquire) != seen) return;
    if (i % 64 == 0 && Clock::now() >= spin_until) break;
  }
  // Both sides are sequentially consistent: either ring_bell() sees this sleeper, or the re-read below sees its ring.
  bell.sleepers.fetch_add(1);
  if (bell.rings.load() == seen && limit > Clock::duration::zero()) futex_sleep(bell.rings, seen, limit);
  bell.sleepers.fetch_sub(1);
}

void ShmP2p::ring_bell(int rank) {
  P2pBell& bell = segment_.bell(rank);
  bell.rings.fetch_add(1);
  if (bell.sleepers.load() != 0) futex_wake_all(bell.rings);
}

void ShmP2p::close() {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    if (failure_.empty()) fail_all("communicator was closed on " + where() + " before every message completed");
    closed_ = true;
  }
  if (sender_.joinable()) {
    ring_bell(rank_);
    sender_.join();
  }
}

}  // namespace dtrain::trainer
