#pragma once

// The shm backend's point-to-point send() and recv() (pipeline parallelism within a node): every (sender, receiver,
// stream) has a ring in the segment (SegmentGeometry::ring_bytes) with two counters (P2pChannel), the bytes the
// sender has written and the bytes the receiver has taken. A message is an 8-byte header (its float count, so a
// recv of another size fails with both sizes named) and its floats.
//
//   send()   copies what fits into the ring on the calling thread; when all of it fits (messages up to about
//            ring_bytes, with the receiver keeping up) the send is complete when send() returns. The rest is queued
//            for this rank's sender thread (started on the first such message), which goes on copying as the
//            receiver frees room, for every ring at once: a ring whose receiver is not reading never holds back
//            another. Messages of one ring keep their order.
//   recv()   takes what has arrived at once; wait() takes the rest on the calling thread, and done() takes what has
//            arrived without waiting. A recv takes the messages of its ring in the order the recvs were posted.
//
// Waiting: whoever writes to a rank's ring or frees room in it rings that rank's doorbell (P2pBell), a futex word
// its recv waits and its sender thread sleep on, after a short spin. A waiting side checks between sleeps (every
// 50 ms at most) that its peer is still in the communicator (PeerSync::gone: a killed peer is seen at once, with
// what it had sent before dying still delivered) and that its message is not older than the communicator's
// timeout, counted from its posting. Either fails the message with a CommError naming it, the rank and the peer.
// After the first failure every later send and recv of the communicator fails at once with it (the rings are out
// of step); the collectives are not affected. A Work dropped before its message completed breaks point-to-point the
// same way (its peer's n-th message would pair with the wrong one otherwise).

#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/comm/shm/segment.h"
#include "trainer/comm/shm/sync.h"

namespace dtrain::trainer {

class ShmP2pWork;

class ShmP2p : public std::enable_shared_from_this<ShmP2p> {
 public:
  // `sync` is the communicator's (for PeerSync::gone); `timeout` bounds every message from its posting.
  ShmP2p(Segment& segment, PeerSync& sync, int rank, std::chrono::milliseconds timeout);
  ~ShmP2p();
  ShmP2p(const ShmP2p&) = delete;
  ShmP2p& operator=(const ShmP2p&) = delete;

  // Communicator::send() and recv(); peer and stream are checked (CommError for a bad one).
  std::shared_ptr<Work> send(const float* data, std::size_t count, int peer, int stream);
  std::shared_ptr<Work> recv(float* data, std::size_t count, int peer, int stream);

  // Fails every message not yet complete ("the communicator was closed") and stops the sender thread; after it
  // nothing touches the segment, which may go. Works that outlive it stay valid.
  void close();

  // For ShmP2pWork: waits until `work` (a recv) has its message or has failed; takes what has arrived without
  // waiting; forgets a Work that is being destroyed (failing point-to-point when its message had not completed).
  // Every Work is finished under mutex_, so abandon() also waits out a finish() in progress on the sender thread.
  void receive_until(ShmP2pWork& work);
  void poll(ShmP2pWork& work);
  void abandon(ShmP2pWork& work);

 private:
  // A posted message not yet complete. Its bytes are the 8-byte header, then the floats.
  struct Message {
    std::byte* data = nullptr;   // send: read only
    std::size_t bytes = 0;       // of the floats
    std::size_t moved = 0;       // of header + floats, through the ring so far
    std::uint64_t header = 0;    // send: the float count; recv: what the sender's header says
    ShmP2pWork* work = nullptr;  // finished when the message completes or fails
  };
  // One direction of one (peer, stream): the messages in order, and the bytes this side has moved through the ring.
  struct Lane {
    std::deque<Message> queue;
    std::uint64_t position = 0;
    bool reserved = false;  // sending: the ring's pages are reserved
  };

  std::shared_ptr<Work> post(bool sending, float* data, std::size_t count, int peer, int stream);
  // Moves what the ring allows of `m`; true when it is complete. Rings the peer's bell when it moved anything.
  bool advance(bool sending, int lane_index, Lane& lane, Message& m);
  // Advances the lane's messages in order, finishing the complete ones; true when the lane moved anything.
  bool progress(bool sending, int lane_index);
  // Fails the lane's front message when its peer is gone or it is past the timeout (after a last look at the ring).
  void check_front(bool sending, int lane_index);
  // Records the first failure ("shm " + why) and fails every queued message: `cause` with it, the others with a
  // message that names them and it.
  void fail_all(const std::string& why, const ShmP2pWork* cause = nullptr);
  void send_loop();
  // Waits until this rank's bell moves past `seen`, spinning briefly, then sleeping at most `limit`.
  void sleep_on_bell(std::uint32_t seen, std::chrono::steady_clock::duration limit);
  void ring_bell(int rank);
  std::string where() const;

  Segment& segment_;
  PeerSync& sync_;
  const int rank_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;  // everything below
  std::vector<Lane> out_;  // by peer * kP2pStreams + stream
  std::vector<Lane> in_;
  std::string failure_;  // the first failure; "" while there is none
  bool closed_ = false;
  std::thread sender_;  // started by the first send that does not complete at once
};

}  // namespace dtrain::trainer
