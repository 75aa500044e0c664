#pragma once

// One shared-memory segment per shm communicator: a file under /dev/shm (mode 0600, named by worker/shm_segment_name.h; see
// shm_segment_dir below) that every rank maps. Rank 0 creates and lays it out; the others open it once rank 0 has marked it ready. Layout, each
// region aligned to a page:
//
//   header                  magic, the geometry below, how many ranks have joined
//   ranks x RankSlot        per rank: liveness mutex, pid, progress word (a futex), waiters, published offset
//   ranks x staging         per rank: 2 slots of chunk_bytes, where user buffers are copied in and out, chunk by chunk
//   ranks x arena           per rank: arena_bytes of address space for Communicator::allocate (shm/arena.h); pages
//                           are reserved only as buffers are allocated (the file is sparse until then)
//   ranks x P2pBell         per rank: the doorbell its point-to-point waits sleep on (shm/p2p.h)
//   ranks^2 x streams x P2pChannel   per ordered pair of ranks and stream: the ring's two counters
//   ranks^2 x streams x ring         per ordered pair and stream: ring_bytes of address space, reserved by the sender
//                                    on its first message there
//
// Every rank maps the whole segment, so a peer's staging slot or arena buffer is a plain pointer.

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dtrain::trainer {

// Where segments live: /dev/shm, shm_open's directory. DTRAIN_SHM_DIR replaces it for tests that need a small tmpfs
// of their own (a full /dev/shm cannot be made safely for one test); the agent removes a round's leftovers from
// /dev/shm only.
std::string shm_segment_dir();

struct SegmentGeometry {
  int ranks = 1;
  // Bytes of one staging slot: the unit of the pipeline for user buffers (shm/pipeline.h). 1 MiB: few sync points
  // per collective (each may cost a futex sleep on a loaded machine), while a chunk just copied in is still in cache
  // when the ranks sum it. On 2 ranks at 64 MiB, 256 KiB slots gave 2.1-2.4 GB/s busbw, 1 MiB slots 3.5-3.8.
  std::size_t chunk_bytes = std::size_t{1} << 20;
  // Address space of each rank's arena; pages are reserved as buffers are allocated.
  std::size_t arena_bytes = std::size_t{16} << 30;
  // Bytes of the ring of each (sender, receiver, stream) of send() and recv() (shm/p2p.h): messages up to about this
  // size are copied in at once and send() completes at once; longer ones stream through it. Address space; a ring's
  // pages are reserved when its sender first uses it (a pipeline uses 2 streams to each of 2 neighbours).
  std::size_t ring_bytes = std::size_t{1} << 20;
};

// The two counters of one ring (shm/p2p.h), on cache lines of their own: bytes the sender has written and bytes the
// receiver has taken, both modulo 2^32 (a ring holds less than 2^31).
struct P2pChannel {
  alignas(64) std::atomic<std::uint32_t> written;
  alignas(64) std::atomic<std::uint32_t> taken;
};

// A rank's doorbell: a peer that wrote to one of its rings or took from one bumps `rings` and wakes it when
// `sleepers` says someone of the rank sleeps on it (its training thread in a recv, its sender thread).
struct P2pBell {
  alignas(64) std::atomic<std::uint32_t> rings;
  std::atomic<std::uint32_t> sleepers;
};

// A rank's part of the header. The progress word and its waiter count share a cache line of their own, so a rank
// announcing progress does not disturb the lines its peers spin on for other ranks.
struct RankSlot {
  pthread_mutex_t alive;            // robust, process-shared; held by the rank while it is in the communicator
  std::atomic<std::int32_t> pid;    // for messages and for telling "died" from "left"
  alignas(64) std::atomic<std::uint32_t> progress;  // futex word: how many sync points the rank has passed
  std::atomic<std::uint32_t> waiters;               // peers in FUTEX_WAIT on `progress`
  alignas(64) std::atomic<std::uint64_t> published;  // where the rank's data of the current collective is
};

class Segment {
 public:
  // Rank 0: creates `name` (O_EXCL, 0600), sizes it, lays it out and marks it ready. Throws CommError naming the
  // file and the fix (a full /dev/shm, a name that exists).
  static std::unique_ptr<Segment> create(const std::string& name, const SegmentGeometry& geometry);
  // Bytes create() reserves at once: the header, the rank slots and the staging slots. The arenas' pages are
  // reserved later, buffer by buffer, and a buffer that finds no room falls back to ordinary memory
  // (trainer/parallel/comm_buffers.h); without these bytes there is no segment at all.
  static std::size_t reserved_bytes(const SegmentGeometry& geometry);
  // "" when the segment directory has room for reserved_bytes(geometry) now, else what is short, for a message:
  // "/dev/shm has 0.9 MiB free (of 1.0 MiB); a segment of 2 ranks reserves 4.0 MiB". The `auto` backend asks this
  // before it chooses shm (trainer/comm/select/from_env.cpp).
  static std::string room_shortfall(const SegmentGeometry& geometry);
  // Other ranks: opens `name` once rank 0 has marked it ready, retrying until `deadline`; throws CommError after it
  // (or at once when the segment's geometry disagrees with this rank's).
  static std::unique_ptr<Segment> open(const std::string& name, const SegmentGeometry& geometry,
                                       std::chrono::steady_clock::time_point deadline);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const { return name_; }
  const SegmentGeometry& geometry() const { return geometry_; }
  int fd() const { return fd_; }
  std::byte* base() const { return base_; }

  RankSlot& slot(int rank) const;
  std::atomic<std::uint32_t>& joined() const;
  // Staging slot 0 or 1 of `rank`.
  std::byte* staging(int rank, int which) const;
  // Offset of `rank`'s arena from base().
  std::size_t arena_offset(int rank) const;
  // Offset of [data, data + bytes) from base() when all of it lies in `rank`'s arena; else SIZE_MAX.
  std::size_t arena_offset_of(int rank, const void* data, std::size_t bytes) const;
  // Point-to-point (shm/p2p.h): `rank`'s doorbell; the counters and the ring of messages from `from` to `to` on
  // `stream` (0 .. Communicator::kP2pStreams - 1), and the ring's offset from base().
  P2pBell& bell(int rank) const;
  P2pChannel& channel(int from, int to, int stream) const;
  std::size_t ring_offset(int from, int to, int stream) const;

  // Removes the name from /dev/shm; the mappings stay valid. Rank 0 does it once every rank has joined, so a job
  // killed later leaves nothing behind; the agent removes what a round killed before that left (worker/shm_segment_name.h).
  void unlink_name();

 private:
  Segment(std::string name, SegmentGeometry geometry, int fd, std::byte* base, std::size_t bytes);

  std::string name_;
  SegmentGeometry geometry_;
  int fd_;
  std::byte* base_;
  std::size_t bytes_;
  bool unlinked_ = false;
};

}  // namespace dtrain::trainer
