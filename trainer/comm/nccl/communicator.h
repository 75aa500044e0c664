#pragma once

// The NCCL backend: collectives between the ranks' GPUs, one GPU per rank. BUFFERS ARE DEVICE POINTERS: memory
// of this communicator's GPU (cudaMalloc on device(), or allocate() below); a host pointer fails the collective
// with a CommError. device_buffers() is true.
//
// Each collective is enqueued on the communicator's own CUDA stream and returns once it is there; collectives run on
// the GPU in issue order. The NCCL communicator is non-blocking: NCCL may put a collective on the stream from a
// thread of its own (and connects to the peers on the first collectives), so the call waits until it is there,
// bounded by the timeout (a peer that never issues it: the communicator is aborted, a CommError). With
// order_after(stream), each collective and each copy first makes the communicator's stream wait, on the GPU, for what
// was enqueued on that stream (the compute backend's) before it was issued: one CUDA event recorded there, then
// cudaStreamWaitEvent; the host does not wait. Without it (the default, or a null stream) the caller orders its
// buffers itself (e.g. synchronises its stream first).
//
// Work::wait() polls the collective's CUDA event and NCCL's asynchronous error until the collective has finished;
// when NCCL reports an error, or the collective has not finished within the timeout (a peer that stopped, or ranks
// that issued different collectives), the communicator is aborted (ncclCommAbort) and wait() throws a CommError
// naming the collective, its size, the rank and NCCL's own text (ncclGetErrorString, and ncclGetLastError's detail).
// After that the communicator is broken: every later collective fails at once with that first error.
//
// Rendezvous: rank 0 calls ncclGetUniqueId and sets it (hex) in the job's store under "nccl/<communicator>",
// the others wait for that key; then a bounded, non-blocking ncclCommInitRankConfig (start.h: a rank that never
// joins is an error naming it, within the timeout, never a hang). With one rank no store is needed.

#include <chrono>
#include <memory>
#include <string>

#include "worker/store/client.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/nccl/unique_id.h"

namespace dtrain::trainer {

struct NcclCommOptions {
  int rank = 0;    // this process's rank in [0, size)
  int size = 1;    // number of ranks
  int device = 0;  // CUDA device (ordinal among the visible ones) this rank uses; from_env takes LOCAL_RANK
  // Store key of the unique id; distinct per communicator of a job round.
  std::string key = "nccl/0";
  // Deadline of the unique-id exchange and of every collective's wait().
  std::chrono::milliseconds timeout{300'000};
};

class NcclCommunicator : public Communicator {
 public:
  // Checks that options.device exists (CommError naming the missing GPU otherwise), exchanges the unique id
  // through `store` (may be null when options.size == 1), and creates the NCCL communicator and its stream.
  NcclCommunicator(std::shared_ptr<store::StoreClient> store, NcclCommOptions options);
  // The job's store from DTRAIN_STORE_ADDR / DTRAIN_JOB_TOKEN (only when size > 1), GPU `device`, and a store key
  // numbered by how many NCCL communicators this process created before (every rank creates them in the same
  // order).
  static std::unique_ptr<NcclCommunicator> from_env(int rank, int size, int device, const CommOptions& options);
  // Waits for the collectives already issued (bounded by the timeout), then destroys the NCCL communicator
  // (aborts it when it is broken or that wait failed).
  ~NcclCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "nccl"; }
  bool device_buffers() const override { return true; }
  // Every collective issued afterwards first makes the communicator's stream wait (cudaStreamWaitEvent) for the
  // work enqueued on `stream` before it: the compute backend's stream, so that a gradient bucket is reduced once
  // backward has written it, without the host waiting. The copies (copy_in, copy_out) wait too.
  void order_after(void* stream) override;
  int device() const;

  // Device memory on device() (cudaMalloc), and copies between it and host memory that are ordered with the
  // collectives on the communicator's stream (after those issued before) and complete when they return.
  float* allocate(std::size_t count) override;
  void release(float* data) override;
  void copy_in(float* buffer, const float* host, std::size_t count) override;
  void copy_out(float* host, const float* buffer, std::size_t count) override;

  std::shared_ptr<Work> allreduce(float* data, std::size_t count) override;
  std::shared_ptr<Work> reduce_scatter(const float* in, float* out, std::size_t count_per_rank) override;
  std::shared_ptr<Work> all_gather(const float* in, float* out, std::size_t count_per_rank) override;
  std::shared_ptr<Work> broadcast(float* data, std::size_t count, int root) override;
  // ncclAllReduce on ncclBfloat16 / ncclFloat16 (NCCL >= 2.10 for bf16).
  std::shared_ptr<Work> allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type) override;
  // ncclAllGather on ncclFloat16: a 2-byte element type (nothing is added, so bf16 values travel unchanged).
  std::shared_ptr<Work> all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                        std::size_t count_per_rank) override;
  // ncclReduceScatter on ncclBfloat16 / ncclFloat16, as allreduce_half.
  std::shared_ptr<Work> reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out, std::size_t count_per_rank,
                                            kernels::Dtype type) override;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// The number of CUDA devices this process sees; 0 when there is none or CUDA cannot be used (no driver, ...).
// `why`, when given, receives CUDA's error string in that case.
int cuda_device_count(std::string* why = nullptr);

}  // namespace dtrain::trainer
