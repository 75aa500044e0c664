#pragma once

// The shared-memory backend: collectives among the ranks of one node through one segment under /dev/shm
// (shm/segment.h), with no network and no kernel copies: each rank reduces its 1/W slice of the data straight out of
// the others' memory (shm/pipeline.h), sums in a fixed rank order (shm/sum.h, AVX2 where the CPU has it), and ranks
// wait for each other on futexes (shm/sync.h). Like the gloo backend, each communicator runs its collectives in
// issue order on its own thread, every collective has the deadline ShmCommOptions::timeout, a peer that dies or
// leaves mid-collective fails it on the others with a CommError within about 50 ms, and after the first failure
// every later collective fails at once.
//
// Point-to-point send() and recv() go through a ring per (sender, receiver, stream) in the same segment
// (shm/p2p.h): one copy in and one out, a message that fits the ring complete when send() returns, no thread per
// message.
//
// Buffers: a collective works on any host memory, copying it through the segment chunk by chunk. A buffer from
// allocate() lives in this rank's part of the segment, so its collectives skip those copies (about half the memory
// traffic of an allreduce); release() gives it back. A buffer stays valid only while the communicator lives.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "trainer/comm/communicator.h"
#include "trainer/comm/shm/pipeline.h"
#include "trainer/comm/shm/segment.h"

namespace dtrain::trainer {

struct ShmCommOptions {
  int rank = 0;  // this process's rank in [0, size)
  int size = 1;  // ranks of the communicator, all on this node
  // The segment's name under /dev/shm (worker/shm_segment_name.h); rank 0 creates it, the others open it. Every rank passes the
  // same name, which must be new.
  std::string name;
  // Deadline of joining (every rank must have opened the segment) and of every collective.
  std::chrono::milliseconds timeout{300'000};
  // Staging slot and arena sizes (segment.h); every rank must pass the same. geometry.ranks is taken from size.
  SegmentGeometry geometry;
  // Rank 0: called once the segment exists, before it waits for the others to join (from_env_group publishes the
  // segment's name then, so that a segment rank 0 could not create is never waited for).
  std::function<void()> created;
};

class ShmCommunicator : public Communicator {
 public:
  // Creates (rank 0) or opens the segment and waits until every rank has joined; throws CommError naming the segment
  // and the missing ranks after options.timeout. Rank 0 then removes the segment's name: the mappings live on, and a
  // job killed from then on leaves nothing in /dev/shm.
  explicit ShmCommunicator(ShmCommOptions options);
  // Under dtrain: the segment is named after DTRAIN_JOB_ID, DTRAIN_NODE_RANK, DTRAIN_RESTART_COUNT and how many
  // communicators this process created before (every rank creates them in the same order), with a nonce rank 0
  // publishes in the job's store (DTRAIN_STORE_ADDR, DTRAIN_JOB_TOKEN) under a key of its node. `rank` and `size`
  // are within this node (LOCAL_RANK, LOCAL_WORLD_SIZE); make_communicator_from_env checks that they are the job's
  // when the shm backend is asked for the whole job.
  static std::unique_ptr<ShmCommunicator> from_env(int rank, int size, const CommOptions& options);
  // A group of ranks of this node (make_group_communicator_from_env): `rank` and `size` within the group, `group`
  // the name every member passes ([A-Za-z0-9_-]), which names the segment (worker/shm_segment_name.h) and the
  // store key of its nonce. The other variables as from_env. Rank 0 creates the segment before it publishes the
  // nonce; when it cannot (a /dev/shm without room for the group's staging slots), it publishes why instead, and
  // every member returns nullptr with `shortfall` set to it, so that they can fall back to another backend together.
  static std::unique_ptr<ShmCommunicator> from_env_group(int rank, int size, const std::string& group,
                                                         const CommOptions& options, std::string& shortfall);
  // Runs the collectives already issued (each bounded by the timeout), then leaves. Buffers from allocate() die
  // with it.
  ~ShmCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "shm"; }
  const std::string& segment_name() const;

  // Room for `count` floats in this rank's arena (page-aligned); CommError when the arena or /dev/shm is full.
  float* allocate(std::size_t count) override;
  // Frees a buffer from allocate(); nullptr is fine; anything else is a programming error (std::invalid_argument).
  void release(float* data) override;
  // Whether [data, data + bytes) lies in this rank's arena, so collectives on it skip the staging copies.
  bool in_segment(const void* data, std::size_t bytes) const;

  std::shared_ptr<Work> allreduce(float* data, std::size_t count) override;
  std::shared_ptr<Work> reduce_scatter(const float* in, float* out, std::size_t count_per_rank) override;
  std::shared_ptr<Work> all_gather(const float* in, float* out, std::size_t count_per_rank) override;
  std::shared_ptr<Work> broadcast(float* data, std::size_t count, int root) override;
  // The 16-bit collectives: the same algorithms on 2-byte elements, sums as shm/sum.h (rank order, rounded after
  // every addition).
  std::shared_ptr<Work> allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type) override;
  std::shared_ptr<Work> all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                        std::size_t count_per_rank) override;
  std::shared_ptr<Work> reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out, std::size_t count_per_rank,
                                            kernels::Dtype type) override;

  // Point-to-point through the segment's rings (shm/p2p.h).
  std::shared_ptr<Work> send(const float* data, std::size_t count, int peer, int stream = 0) override;
  std::shared_ptr<Work> recv(float* data, std::size_t count, int peer, int stream = 0) override;

 private:
  // Counts the bytes a ring would send for `kind` on `buffer_bytes` (Communicator::bytes_sent) and queues `c`.
  std::shared_ptr<Work> issue(ShmCollective c, Collective kind, std::uint64_t buffer_bytes);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::trainer
