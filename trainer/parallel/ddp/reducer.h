#pragma once

// DDP gradient reduction over one flat gradient buffer. Buckets are contiguous slices of that buffer taken from its
// end: the first bucket holds the last first_bucket_bytes, the next ones bucket_bytes each, down to offset 0
// (buckets.h, which also gives the default bucket_bytes and why). The model lays its parameters out so that backward
// finishes them from the end of the buffer towards the start (final LayerNorm, last layer, ..., first layer,
// positions, token embedding), so a bucket is complete as soon as backward has passed its start, and its allreduce
// runs on the communicator's thread while backward goes on.
// Gradients are divided by the world size just before their bucket's allreduce, so the result is the mean over ranks.
//
// Communication dtype (DdpOptions::comm_dtype), PyTorch's DDP compression hooks: with bf16 or fp16 a bucket is cast
// to 16 bits and divided by the world size in 16 bits (fp16_compress_hook / bf16_compress_hook:
// `bucket.to(dtype).div_(world)`), allreduced in 16 bits (each pairwise sum in fp32, rounded back), and cast back
// into the fp32 gradients when finish_backward() has waited for it: half the bytes on the wire, gradients rounded
// to 16 bits. The 16-bit copy is a buffer of the reducer's own (2 bytes per gradient), from DdpOptions::buffers.
// With one rank the cast and the division still happen, so a run's numerics do not depend on the world size.
//
// Per backward pass:
//   reducer.begin_backward(sync);        // sync=false on micro-steps before the last (no_sync): nothing is sent
//   model.backward(..., [&](std::size_t offset, std::size_t count) { reducer.grads_ready(offset, count); });
//   reducer.finish_backward();           // waits for every bucket; grads now hold the mean over ranks
// While finish_backward() waits for bucket i the worker's phase is "allreduce bucket i" (buckets numbered in the
// order they are reduced, 0 the one at the end of the buffer), so a rank hung in a bucket's allreduce says which; the
// waits count as exposed communication (trainer/metrics/comm_time.h).
//
// What overlap buys depends on free CPU. The Gloo backend's work is CPU work: its thread sums the ring's chunks and
// loopback TCP copies run in the kernel on the sending thread's core. When every core runs backward (2 ranks on a
// 2-core host, each pinned to one core with OMP_NUM_THREADS=1, as dtrain's binding does), the communication thread
// time-slices with backward: hidden_fraction() comes out high (0.9 and more) because finish_backward barely waits,
// but backward itself slows by about the communication's CPU time, so the step is no faster than backward followed
// by one allreduce (measured with tests/tools/comm_worker.cpp `overlap`). Overlap is real when communication waits
// on a wire (other hosts, or NCCL's copy engines) or when a core is left for it (OMP_NUM_THREADS = cores - 1 per
// rank); judge it by step time, not by hidden_fraction() alone.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/kernels/half.h"
#include "trainer/model/buffers.h"
#include "trainer/parallel/ddp/buckets.h"

namespace dtrain::trainer {

struct DdpOptions {
  std::uint64_t first_bucket_bytes = kFirstBucketBytes;  // PyTorch DDP's first bucket: 1 MiB
  // The buckets after the first (--ddp-bucket-mb); unset: default_bucket_bytes of the gradient's bytes (buckets.h).
  std::optional<std::uint64_t> bucket_bytes;
  // What the gradients travel as: fp32 (PyTorch DDP's default, no hook), bf16 or fp16 (the compression hooks, see
  // the top of this file). Bucket sizes above stay in fp32 bytes, as PyTorch's bucket_cap_mb does.
  kernels::Dtype comm_dtype = kernels::Dtype::fp32;
  // Where the 16-bit copy lives (trainer/model/buffers.h; the trainer's CommBuffers); null: ordinary memory. It must
  // outlive the reducer.
  BufferSource* buffers = nullptr;
  // The compute backend whose memory the gradients are in, when the host cannot touch it (a GPU: its
  // host_accessible() is false): the 1/W scaling and the 16-bit casts then run on it, and the buffers must be its
  // memory. Null (host gradients): they run on the host as always.
  kernels::Backend* device = nullptr;
};

// Timing of the last synchronised backward pass.
struct DdpStats {
  std::size_t buckets = 0;
  double comm_ms = 0;      // sum of the buckets' allreduce durations, measured on the communication thread
  double exposed_ms = 0;   // time finish_backward() spent waiting for communication after backward had ended
  std::uint64_t bytes_sent = 0;  // what this rank sent for the pass (Communicator::bytes_sent's difference)
  // Fraction of communication time that overlapped backward: 1 - exposed / comm (1 when there was no communication).
  double hidden_fraction() const { return comm_ms > 0 ? 1.0 - exposed_ms / comm_ms : 1.0; }
};

class DdpReducer {
 public:
  DdpReducer(Communicator& comm, float* grads, std::size_t count, DdpOptions options = {});
  DdpReducer(const DdpReducer&) = delete;
  DdpReducer& operator=(const DdpReducer&) = delete;
  ~DdpReducer();

  // Starts a pass; throws std::logic_error if the previous one was not finished.
  void begin_backward(bool sync);
  // grads[offset, offset + count) are final for this backward pass. Ranges arrive in decreasing offset order and
  // together cover the buffer exactly once per pass; anything else throws std::logic_error.
  void grads_ready(std::size_t offset, std::size_t count);
  // Waits for every bucket's allreduce (throws the first CommError after all have ended); throws std::logic_error
  // if the pass did not cover the whole buffer.
  void finish_backward();

  // The buckets as (offset, count), in the order they are reduced.
  const std::vector<std::pair<std::size_t, std::size_t>>& buckets() const { return buckets_; }
  const DdpStats& last_stats() const { return stats_; }

 private:
  Communicator& comm_;
  float* grads_;
  std::size_t count_;
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;
  DdpStats stats_;

  bool in_pass_ = false;
  bool sync_ = false;
  std::size_t ready_from_ = 0;   // grads[ready_from_, count_) are final in this pass
  std::size_t next_bucket_ = 0;  // index in buckets_ of the next bucket to start
  kernels::Dtype comm_dtype_;
  std::unique_ptr<HeapBuffers> own_buffers_;  // when DdpOptions::buffers is null
  BufferSource* buffers_;
  kernels::Backend* device_ = nullptr;  // DdpOptions::device
  std::uint16_t* half_ = nullptr;  // the 16-bit copy of the gradients (comm_dtype bf16 or fp16), else null
  std::vector<const char*> phases_;   // "allreduce bucket i" (health/phase.h), one per bucket
  struct Pending {
    std::size_t bucket;
    std::shared_ptr<Work> work;
  };
  std::vector<Pending> pending_;
  std::vector<std::size_t> started_;  // buckets whose 16-bit copy must be cast back after the wait
  std::uint64_t sent_at_begin_ = 0;

  void start_bucket(std::size_t index);
  void cast_back();
  // Waits for every pending work; returns the first failure's message (empty if none).
  std::string drain();
};

}  // namespace dtrain::trainer
