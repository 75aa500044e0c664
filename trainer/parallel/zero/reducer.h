#pragma once

// ZeRO gradient reduction: each unit's gradient (shards.h) is reduce-scattered in place as soon as backward has
// passed the unit's start, so rank r ends with the sum over ranks of its shard while backward goes on with the
// units before it (the communicator runs collectives in issue order on its own thread, as for DDP's buckets).
// Gradients arrive already divided by W (the loop's loss scale is 1 / (K W)), so the sum is the mean over ranks.
//
// With release_grads (stages 2 and 3) the rest of a unit's gradient is released (pages.h) once its reduce-scatter
// has finished: it reads as zeros again, so the next micro-step's backward accumulates its local gradient there
// while the owned shard keeps the reduced sum so far; the next reduce-scatter then adds the reduced sum (held by one
// rank only) to everyone's new gradient, and the shard holds the mean over ranks and micro-steps.
//
// A 16-bit reduce dtype (--reduce-dtype bf16|fp16, FSDP's reduce_dtype): each unit's gradient is rounded to 16 bits
// into its slice of a 16-bit copy of the gradient buffer, reduce-scattered in 16 bits (half the bytes; each pairwise
// addition in fp32, rounded back, as Gloo and NCCL add 16-bit values) and the owned shard widened back into the fp32
// gradient. So that only what crosses the wire is rounded, a sum reduced on an earlier micro-step is not sent again: on
// a pass that is not the step's last, the widened shard is added to an fp32 accumulator of the owned shards (4P/W, made
// on the first such pass) and the shard itself reads as zeros for the next backward; the last pass adds the accumulator
// back. The gradient buffer and the accumulation stay fp32. The 16-bit copy is allocated once and never written as a
// whole: a unit's slice is written when its reduce-scatter starts and its pages go back to the kernel when it completes
// (pages.h), so it is resident only while units are in flight, as a buffer per unit would be, without allocating and
// zeroing one per unit on every backward pass.
//
// On a device (the `device` backend, a GPU whose memory the host cannot touch: its host_accessible() is false) the
// gradients, the 16-bit copy (from `buffers`, the model's: device memory) and the fp32 accumulator (the backend's
// memory) are device buffers, and the casts, the accumulation and the zeroing run as the backend's ops. There are no
// pages to give back: a release of the gradient outside the owned shard zeroes it with the backend instead (the next
// micro-step accumulates there, so it must read as zeros), and the 16-bit copy is left as it is (each unit's slice is
// written whole before it is sent). So on a GPU the full-size gradient buffer stays allocated: the communication is
// ZeRO-2's, the memory saving is not yet. With a null device (host memory) everything runs on the host as above.
//
// Per backward pass, as DdpReducer:
//   reducer.begin_backward(sync, last); // stage 1: sync only on the last micro-step (no_sync); stages 2, 3: always
//   model.backward(..., [&](std::size_t offset, std::size_t count) { reducer.grads_ready(offset, count); });
//   reducer.finish_backward();        // waits for every unit; owned shards hold the mean gradient
// While the training thread waits for unit u's reduce-scatter the worker's phase is "reduce-scatter unit u"
// (health/phase.h), and the wait counts as exposed communication (trainer/metrics/comm_time.h).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"
#include "trainer/kernels/half.h"
#include "trainer/model/buffers.h"
#include "trainer/parallel/zero/shards.h"

namespace dtrain::trainer {

class ZeroReducer {
 public:
  // reduce_type: fp32, or bf16 / fp16 (top of this file).
  // buffers: where the 16-bit copy lives (trainer/model/buffers.h; the model's); null: ordinary memory, or the
  // device's with a device. It must outlive the reducer.
  // device: the compute backend whose memory grads is in when the host cannot touch it (a GPU; top of this file);
  // null: host gradients, handled on the host. It must outlive the reducer.
  ZeroReducer(Communicator& comm, const ZeroShards& shards, float* grads, bool release_grads,
              kernels::Dtype reduce_type = kernels::Dtype::fp32, BufferSource* buffers = nullptr,
              kernels::Backend* device = nullptr);
  ZeroReducer(const ZeroReducer&) = delete;
  ZeroReducer& operator=(const ZeroReducer&) = delete;
  ~ZeroReducer();

  // Starts a pass; last: the optimizer step's last micro-step. Throws std::logic_error if the previous pass was
  // not finished.
  void begin_backward(bool sync, bool last = true);
  // grads[offset, offset + count) are final for this pass; ranges arrive in decreasing offset order and cover the
  // buffer exactly once per pass (std::logic_error otherwise).
  void grads_ready(std::size_t offset, std::size_t count);
  // Waits for every unit's reduce-scatter (throws CommError after all ended if one failed).
  void finish_backward();

  // Bytes this rank has sent in reduce-scatters so far (ring accounting, shards.h); the loop reads the difference.
  std::uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  struct Pending {
    int unit;
    std::shared_ptr<Work> work;
  };
  void start_unit(int unit);
  // Waits for pending[i] and releases its unit's gradient outside the owned shard; returns an error or "".
  std::string complete(const Pending& p);
  // Completes the pending units that have finished (all of them with wait_all).
  std::string retire(bool wait_all);
  // 16-bit reduce: the reduced owned shard of p back into the fp32 gradient (top of this file).
  void widen_owned(const Pending& p);
  // The same, on the device.
  void widen_owned_on_device(const Pending& p);
  // The unit's gradient outside the owned shard reads as zeros again (released on the host, zeroed on a device).
  void release_unit(int unit);

  Communicator& comm_;
  const ZeroShards& shards_;
  float* grads_;
  bool release_grads_;
  kernels::Dtype reduce_type_;
  kernels::Backend* device_;  // null: host gradients
  std::vector<float> accumulated_;  // 16-bit reduce over several micro-steps: this rank's shards, state layout
  float* device_accumulated_ = nullptr;  // the same on a device: the backend's memory, made when first needed
  // 16-bit reduce: the rounded gradients in the buffer's layout, each unit reduced in place in its slice (top of
  // this file); made on the first pass that sends.
  std::unique_ptr<BufferSource> own_buffers_;  // when the constructor was given no buffers
  BufferSource* buffers_;
  std::uint16_t* half_ = nullptr;
  std::vector<const char*> phases_;  // "reduce-scatter unit u" (health/phase.h)
  std::uint64_t bytes_sent_ = 0;

  bool in_pass_ = false;
  bool sync_ = false;
  bool last_ = true;
  std::size_t ready_from_ = 0;
  int next_unit_ = 0;  // the unit whose start backward reaches next (units go from the last to the first)
  std::vector<Pending> pending_;
  std::string failure_;
};

}  // namespace dtrain::trainer
