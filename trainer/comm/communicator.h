#pragma once

// The trainer's communication interface: asynchronous collectives on fp32 buffers over every rank of the job, and
// point-to-point send()/recv() between two of them (pipeline parallelism; see send() below).
// Backends are siblings with the same file names: comm/local/ (one rank), comm/gloo/ (CPU, TCP), comm/shm/ (CPU,
// the ranks of one node through shared memory), comm/hier/ (shm within nodes composed with gloo across them) and
// comm/nccl/ (GPU); select/from_env.cpp picks one. Every rank must issue the same collectives in the same order.
// A call returns at once with a Work handle; collectives run in issue order (gloo: on the backend's own thread;
// nccl: on its own CUDA stream), so a caller (backward, in DDP) keeps computing while they run. Buffers must stay
// valid and untouched until wait() returns.
//
// WHERE BUFFERS LIVE depends on the backend, and device_buffers() says which:
//   local, gloo, shm, hier: host memory (device_buffers() == false); shm's (and hier's) allocate() places buffers
//                in the node's shared segment, where its collectives need no staging copies (any host memory works
//                too);
//   nccl:        device memory of this rank's GPU (device_buffers() == true): pointers from cudaMalloc on the
//                communicator's device (LOCAL_RANK). A host pointer fails the collective with a CommError.
// Code that works with any backend (the bench driver, tests) allocates and fills buffers through allocate(),
// release(), copy_in() and copy_out(), which do the right thing for the backend (plain host memory by default).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/kernels/half.h"

namespace dtrain::trainer {

// A collective that failed or timed out. The message names the collective, its size, this rank and the peer or
// address involved where known, and what to check.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Handle on one queued collective, or on one send() or recv().
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective has finished; throws CommError if it failed or timed out.
  virtual void wait() = 0;
  // Whether it has finished (successfully or not); never blocks.
  virtual bool done() const = 0;
  // How long the collective ran on the backend's thread, from its start to its end, without the time it queued
  // behind earlier ones; meaningful once wait() has returned. 0 for a backend that does no communication. send(),
  // recv(): from posting to completion, the wait for the peer included.
  virtual double elapsed_ms() const { return 0; }
  // Device backends (nccl): the work queued on `stream` (a cudaStream_t; kernels::Backend::compute_stream()) after
  // this call waits, on the device, for this collective, and the host goes on at once; the caller still wait()s
  // later (before it reads a result on the host, and to hear of a failure or a timeout). The default, for host
  // backends, is wait().
  virtual void order_before(void* stream) {
    (void)stream;
    wait();
  }
};

// A Work that has already finished, successfully: what a collective without communication returns (one rank).
std::shared_ptr<Work> done_work();

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "local" (one rank, no communication), "gloo", "shm", "nccl".
  virtual std::string backend() const = 0;
  // Whether the buffers passed to the collectives are device pointers (nccl) rather than host memory (local,
  // gloo, shm); see the top of this file.
  virtual bool device_buffers() const { return false; }

  // Device backends (nccl): every collective issued after this call first waits, on the device, for the work
  // enqueued on `stream` (a cudaStream_t; kernels::Backend::compute_stream()) before the collective was issued, so
  // that a gradient bucket is reduced only once backward has produced it, without the host waiting. Host backends
  // ignore it (their callers compute on the host, in order). Null: no such ordering.
  virtual void order_after(void* stream) { (void)stream; }

  // Buffers where this backend wants them. allocate() returns room for `count` floats (uninitialised; nullptr
  // for 0) and throws CommError when it cannot; release() frees it (nullptr is fine). copy_in() copies `count`
  // floats from host memory into such a buffer, copy_out() from such a buffer into host memory; both return once
  // the copy is complete. Defaults: host memory and memcpy.
  virtual float* allocate(std::size_t count);
  virtual void release(float* data);
  virtual void copy_in(float* buffer, const float* host, std::size_t count);
  virtual void copy_out(float* host, const float* buffer, std::size_t count);

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

  // data[0, count) holds 16-bit values of `type` (bf16 or fp16, kernels/half.h) and becomes their elementwise sum
  // over ranks, each pairwise addition done in fp32 and rounded back to `type`, as Gloo's and NCCL's 16-bit sums
  // do (the order of the additions is the backend's). Half the bytes of allreduce() on the wire. The default
  // fails with a CommError naming the backend.
  virtual std::shared_ptr<Work> allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type);
  // all_gather() of 16-bit values (bf16 or fp16 alike: nothing is added): in holds count_per_rank of them, out
  // receives size() * count_per_rank, rank r's chunk at r * count_per_rank; in may be out's own chunk. Half the bytes
  // of all_gather() on the wire (ZeRO-3's 16-bit parameters). The default fails with a CommError naming the backend.
  virtual std::shared_ptr<Work> all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                                std::size_t count_per_rank);
  // reduce_scatter() of 16-bit values of `type` (bf16 or fp16) with allreduce_half()'s arithmetic: in holds
  // size() * count_per_rank of them, out receives count_per_rank: the sum over ranks of chunk rank(), each pairwise
  // addition done in fp32 and rounded back to `type` (the order of the additions is the backend's); out may be in's
  // own chunk. Half the bytes of reduce_scatter() on the wire (ZeRO's 16-bit gradient reduction). fp32 is refused
  // with a CommError (use reduce_scatter()). The default fails with a CommError naming the backend.
  virtual std::shared_ptr<Work> reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out,
                                                    std::size_t count_per_rank, kernels::Dtype type);

  // Point-to-point (pipeline parallelism): send() sends data[0, count) to rank `peer`; recv() receives `count`
  // floats from rank `peer` into data. Messages from one rank to another arrive in the order they were sent.
  // Both return at once with a Work; wait() returns once the buffer may be reused (send) / holds the data (recv).
  // They do not go through the collective queue: a recv waiting for its peer never holds back a collective issued
  // after it, nor a send. `stream` (0 .. kP2pStreams - 1) keeps independent orders: the n-th send of a stream to a
  // peer pairs with the peer's n-th recv of that stream from this rank, whatever the other streams do (a pipeline's
  // activations and gradients, which two ranks may exchange in different orders with interleaved stages). Default:
  // a CommError naming the backend ("point-to-point is not supported by the X backend ...").
  static constexpr int kP2pStreams = 16;
  virtual std::shared_ptr<Work> send(const float* data, std::size_t count, int peer, int stream = 0);
  virtual std::shared_ptr<Work> recv(float* data, std::size_t count, int peer, int stream = 0);

  // Bytes this rank has sent for the collectives issued so far, counted when each is issued, as ring algorithms
  // send them (ring_bytes_per_rank below), and for its send()s (count * 4 each); a single rank sends none. Callers
  // take differences (bytes per step).
  std::uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }

 protected:
  void count_sent(std::uint64_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }
  // The one refusal of fp32 by a 16-bit collective: a CommError naming this backend, `what` (the collective and
  // its size) and `fp32_collective`, the function to call instead. Returns when `type` is bf16 or fp16.
  void refuse_fp32(kernels::Dtype type, const std::string& what, const char* fp32_collective) const;

 private:
  std::atomic<std::uint64_t> bytes_sent_{0};
};

// A collective on a few host floats. A communicator that takes device buffers (nccl) gets them in a buffer of its
// own memory, copied in before and out after; the others take `values` as they are. `op` issues the collective on
// the pointer it is given and waits for it.
template <class Op>
void on_host_floats(Communicator& comm, float* values, std::size_t count, Op op) {
  if (!comm.device_buffers()) {
    op(values);
    return;
  }
  float* buffer = comm.allocate(count);
  try {
    comm.copy_in(buffer, values, count);
    op(buffer);
    comm.copy_out(values, buffer, count);
  } catch (...) {
    comm.release(buffer);
    throw;
  }
  comm.release(buffer);
}

// The collectives, for ring_bytes_per_rank.
enum class Collective { allreduce, reduce_scatter, all_gather, broadcast };

// What one of `ranks` ranks sends for a collective whose largest buffer is `buffer_bytes` (allreduce, broadcast:
// the buffer; reduce_scatter: the input; all_gather: the output), in a ring: allreduce 2(n-1)/n of it (a
// reduce-scatter then an all-gather), reduce_scatter and all_gather (n-1)/n, broadcast all of it. These are
// nccl-tests' bus-bandwidth factors (comm/bench.h), so bytes_sent() and the bench's busbw agree. 0 for one rank.
std::uint64_t ring_bytes_per_rank(Collective collective, std::uint64_t buffer_bytes, int ranks);

struct CommOptions {
  // Which backend make_communicator_from_env builds: "gloo" (CPU, TCP), "shm" (CPU, every rank on this node,
  // through shared memory), "hier" (CPU: shm within each node, gloo across nodes; hier/communicator.h), "nccl" (GPU;
  // buffers are device pointers, see above) or "auto": shm when every rank is on this node, gloo with one rank per
  // node, hier with several ranks on each of several nodes, and gloo (said on rank 0's stderr) when the nodes run
  // different numbers of ranks; the ranks agree on the layout through the job's store (node_layout.h), so they
  // always pick the same. Empty (the default): DTRAIN_COMM_BACKEND when set, else auto. With one rank every CPU
  // backend gives the "local" communicator instead.
  std::string backend;
  // Deadline of rendezvous and of every collective; a peer that stops answering fails the collective after this.
  std::chrono::milliseconds timeout{300'000};
};

// The communicator a worker started by dtrain (or torchrun) should use: RANK and WORLD_SIZE from the environment,
// rendezvous through the job's store (DTRAIN_STORE_ADDR, DTRAIN_JOB_TOKEN), the network interface from
// GLOO_SOCKET_IFNAME when set, the backend as CommOptions::backend says (by default `auto`, from where the ranks
// run: LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE). Without WORLD_SIZE, or with WORLD_SIZE=1, a
// single-rank "local" communicator. With backend nccl: an NCCL communicator on GPU LOCAL_RANK (0 when unset), its
// unique id exchanged through the job's store (none needed with one rank); when dtrain was built without NCCL, a
// CommError that says so. `auto` never picks nccl: GPU buffers need it asked for. Throws CommError naming the
// missing or bad variable or backend.
std::unique_ptr<Communicator> make_communicator_from_env(const CommOptions& options = {});

// A communicator over some of the job's ranks (a tensor- or data-parallel group; trainer/parallel/grid/rank_grid.h):
// `members` are world ranks in increasing order, RANK among them, and `name` is the same on every member and
// different for every group of the job (it names the group's rendezvous keys in the job's store). Every member must
// call it, and every rank must make its groups in the same order. One member: the "local" communicator. A group
// whose members are all on one node, by the layout the ranks agreed on when they made the job's communicator
// (make_communicator_from_env with backend auto, shm or hier, called first), gets the shm backend (collectives and
// send()/recv() through shared memory; its segment reserves the staging slots of its members, as the job's does;
// when the group's rank 0 cannot make it, every member falls back to gloo together and rank 0 says why on stderr);
// any other group, or any group when gloo was asked for, gets gloo (CPU, TCP, whatever nodes the members are on).
// nccl groups are not built yet (CommError saying so). Throws CommError for a RANK that is not among the members.
std::unique_ptr<Communicator> make_group_communicator_from_env(const std::vector<int>& members,
                                                               const std::string& name,
                                                               const CommOptions& options = {});

}  // namespace dtrain::trainer
