#pragma once

// The trainer's communication interface: asynchronous collectives on fp32 buffers over every rank of the job.
// Backends are siblings with the same file names: comm/gloo/communicator.{h,cpp} (CPU, TCP) and, later,
// comm/nccl/communicator.{h,cpp} (GPU). Every rank must issue the same collectives in the same order. A call
// returns at once with a Work handle; collectives run in issue order on the backend's own thread, so a caller
// (backward, in DDP) keeps computing while they run. Buffers must stay valid and untouched until wait() returns.

#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

namespace dtrain::trainer {

// A collective that failed or timed out. The message names the collective, its size, this rank and the peer or
// address involved where known, and what to check.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Handle on one queued collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective has finished; throws CommError if it failed or timed out.
  virtual void wait() = 0;
  // Whether it has finished (successfully or not); never blocks.
  virtual bool done() const = 0;
  // How long the collective ran on the backend's thread, from its start to its end, without the time it queued
  // behind earlier ones; meaningful once wait() has returned. 0 for a backend that does no communication.
  virtual double elapsed_ms() const { return 0; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "local" (one rank, no communication), "gloo", "nccl".
  virtual std::string backend() const = 0;

  // data[0, count) becomes the elementwise sum over ranks.
  virtual std::shared_ptr<Work> allreduce(float* data, std::size_t count) = 0;
  // in holds size() * count_per_rank floats; out receives count_per_rank floats: the sum over ranks of chunk rank().
  // out may be in's own chunk (in + rank() * count_per_rank): in place.
  virtual std::shared_ptr<Work> reduce_scatter(const float* in, float* out, std::size_t count_per_rank) = 0;
  // in holds count_per_rank floats; out receives size() * count_per_rank floats, rank r's chunk at r * count_per_rank.
  // in may be out's own chunk (out + rank() * count_per_rank): in place.
  virtual std::shared_ptr<Work> all_gather(const float* in, float* out, std::size_t count_per_rank) = 0;
  // data[0, count) on every rank becomes root's.
  virtual std::shared_ptr<Work> broadcast(float* data, std::size_t count, int root) = 0;
};

struct CommOptions {
  // Deadline of rendezvous and of every collective; a peer that stops answering fails the collective after this.
  std::chrono::milliseconds timeout{300'000};
};

// The communicator a worker started by dtrain (or torchrun) should use: RANK and WORLD_SIZE from the environment,
// rendezvous through the job's store (DTRAIN_STORE_ADDR, DTRAIN_JOB_TOKEN), the network interface from
// GLOO_SOCKET_IFNAME when set. Without WORLD_SIZE, or with WORLD_SIZE=1, a single-rank "local" communicator.
// Throws CommError naming the missing or bad variable.
std::unique_ptr<Communicator> make_communicator_from_env(const CommOptions& options = {});

}  // namespace dtrain::trainer
