#pragma once

// ZeRO stages 1-3 for the training loop (trainer/train/loop.h), on the model's padded flat buffers
// (trainer/model/layout.h) and the shards of shards.h. One optimizer step:
//   engine.zero_grad()                                  stage 1: the whole buffer; 2, 3: the owned shards
//   for micro-step m in 0 .. K-1:
//     forward                                           stage 3: units gathered/released by the model's hooks
//     engine.begin_backward(last = m == K-1)            stage 1: reduce-scatter only on the last micro-step
//     backward(1 / (K W), engine.grads_ready())          (no_sync); stages 2, 3: every micro-step, into the shard
//     engine.finish_backward()
//   norm = engine.clip_grad_norm(--grad-clip)           sum of squared shard norms, allreduced
//   engine.step(lr, t)                                  AdamW on the owned shards; stages 1, 2 (fp32 master):
//                                                       all-gather the fp32 params
//   engine.refresh_working_params()                     16-bit precision: the working copy from the master; stages
//                                                       1, 2 with a sharded master: its all-gather in 16 bits
// Gradient accumulation, written down: stage 1 keeps full local gradients and communicates once per step, like
// DDP's no_sync; stages 2 and 3 cannot keep a full gradient, so they reduce-scatter every micro-step and accumulate
// into the owned shard (reducer.h says how), sending K times the bytes.
// Stage 3 with a 16-bit precision (FSDP's param_dtype): the fp32 master is the owned shards of the parameter buffer
// (nothing else of it exists on a rank), the model's 16-bit working copy is sharded the same way and is what the
// gatherer all-gathers (half the bytes), refreshed from the owned master shards after each step. With
// --param-dtype fp32 it gathers the fp32 master instead and rounds each gathered unit into the working copy.
// Stages 1 and 2 with a 16-bit precision shard the master too (the ZeRO paper's 12P/W of fp32 optimizer state): a
// rank keeps the fp32 master of its owned shards only and the whole 16-bit working copy; after the step each rank
// rounds its updated shards into the working copy, which is all-gathered in 16 bits (half the bytes of fp32), and
// the tensors fp32 kernels read are widened from it (as stage 3 does per unit). --param-dtype fp32 keeps the whole
// fp32 master on every rank and all-gathers it in fp32 instead, so the model computes exactly as with --zero 0.
// --reduce-dtype (reducer.h) is the dtype of the gradient reduce-scatters, independent of all this.
// Every wait for a collective names its phase ("all-gather unit u", "reduce-scatter unit u", "all-gather (the
// gradient norms)") and counts as exposed communication (trainer/metrics/comm_time.h), the parameter all-gathers
// after the optimizer update included.
//
// On a GPU (the model's backend is not host_accessible(): its parameters, gradients, working copy, compute_params()
// and AdamW's m and v are device memory, and the communicator takes device buffers) the engine, the reducer and
// the gatherer do the same collectives in the same order on those device buffers, and every cast, widening,
// accumulation and zeroing is one of the backend's ops; the host only reads and writes host copies: the gradient
// norms' all-gather goes through a buffer of the communicator's memory, gather_moments() all-gathers the moments
// into one and copies them out, load_moments() copies the host moments in. What does not carry over is the memory
// saving of releases: device memory has no pages to give back (pages.h is host-only), so on a GPU the full-size
// parameter, gradient and working-copy buffers stay allocated (gradients are zeroed outside the owned shards
// instead, since later micro-steps accumulate there) and ZeRO-3 saves no parameter memory there yet; memory()
// still says what a rank would hold with the releases. The gather/release structure, the prefetch and the bytes
// on the wire are the same as on the host. With host memory (the cpu backend) everything runs on the host exactly
// as described above.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/zero/gatherer.h"
#include "trainer/parallel/zero/reducer.h"
#include "trainer/parallel/zero/shards.h"

namespace dtrain::trainer {

// The dtypes of the engine's collectives, as PyTorch FSDP's MixedPrecision names them.
struct ZeroDtypes {
  // Parameter all-gathers: fp32 or the model's precision; unset = the model's precision.
  std::optional<kernels::Dtype> param;
  // Gradient reduce-scatters (reducer.h): fp32, bf16 or fp16.
  kernels::Dtype reduce = kernels::Dtype::fp32;
};

// What one step measured (metrics).
struct ZeroStepStats {
  std::uint64_t comm_bytes = 0;            // reduce-scatters and all-gathers this rank sent during the step
  std::optional<std::uint64_t> gathered_peak_bytes;  // stage 3: the most bytes of gathered units alive at once
};

class ZeroEngine {
 public:
  // stage 1..3; model built with ParamLayout(config, comm.size()) padding (Gpt(config, backend, W)).
  // dtypes.param (--param-dtype): what the parameter all-gathers carry, fp32 or the model's precision (the
  // default); std::invalid_argument otherwise. fp32 for a 16-bit model keeps the master whole at stages 1-2, and
  // at stage 3 gathers the master and rounds each unit into the working copy as it arrives: the model then
  // computes exactly as with --zero 0, at twice the bytes. dtypes.reduce: see reducer.h.
  ZeroEngine(int stage, Communicator& comm, Gpt& model, const AdamWOptions& options, ZeroDtypes dtypes = {});
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  int stage() const { return stage_; }
  const ZeroShards& shards() const { return shards_; }
  AdamW& optimizer() { return optimizer_; }
  // What this rank holds (shards.h: zero_memory, or mixed_zero_memory for a 16-bit model).
  ZeroMemory memory() const;

  // After every rank holds the whole parameter buffer (the start's broadcast): makes the 16-bit working copy, and
  // releases what this rank does not keep (stage 3: the parameters; a sharded master: the master).
  void shard_params();
  // The whole fp32 buffer on every rank for a checkpoint (stage 3 gathers; a no-op otherwise), and back.
  void gather_params();
  void release_params();
  // The model's 16-bit working copy from the master after a step: the whole buffer, or with a sharded master the
  // owned shards (stages 1-2 then all-gather it and widen the fp32 kernels' tensors).
  void refresh_working_params();
  // AdamW's moments of the whole buffer (buffer layout) gathered from every rank's shards, and the reverse: each
  // rank takes its shards of full moments (resume).
  void gather_moments(std::vector<float>& m, std::vector<float>& v);
  void load_moments(const float* m, const float* v);

  void zero_grad();
  void begin_backward(bool last_micro_step);
  const Gpt::GradsReady& grads_ready() const { return grads_ready_; }
  void finish_backward();
  // torch.nn.utils.clip_grad_norm_ over the shards of all ranks; returns the norm before clipping (read back to
  // the host: a host wait on a device).
  float clip_grad_norm(float max_norm);
  // The same with the norm written to *norm (backend memory) and nothing read back: for a step on a device.
  void clip_grad_norm_to(float max_norm, float* norm);
  void step(float lr, long t);
  // The step's measurements; starts counting the next one.
  ZeroStepStats take_stats();

 private:
  int stage_;
  Communicator& comm_;
  Gpt& model_;
  kernels::Backend* device_;  // the model's backend when its memory is a device's (top of this file), else null
  ZeroShards shards_;
  std::vector<ParamSpan> spans_;
  AdamW optimizer_;
  ZeroReducer reducer_;
  std::unique_ptr<ParamGatherer> gatherer_;
  // All-gathers the fp32 parameters' owned shards into the whole buffer and waits; returns the bytes sent.
  std::uint64_t all_gather_master();
  // Releases the fp32 parameters outside the owned shards (host memory only).
  void release_master();
  // gather_moments with the optimizer's state in device memory.
  void gather_device_moments(std::vector<float>& m, std::vector<float>& v);
  // Stages 1-2, sharded master: all-gathers the working copy's owned shards and widens the fp32 kernels' tensors
  // from it (Gpt::compute_params); returns the bytes sent.
  std::uint64_t all_gather_working();
  // The fp32 kernels' tensors of a unit (Gpt::fp32_tensors) from the working copy into Gpt::compute_params.
  void widen_unit(int unit);

  Gpt::GradsReady grads_ready_;
  std::vector<const char*> gather_phases_;  // "all-gather unit u" (health/phase.h), stages 1-2's all-gathers
  // clip_grad_norm's scalars in the backend's memory: each rank's sum of squares as two floats (2W), then this
  // rank's sum and the total as doubles, then the norm.
  kernels::BackendArray norm_scratch_;
  bool sharded_master_ = false;      // 16-bit, param dtype = the precision: only the owned master shards exist
  bool rounded_on_gather_ = false;   // stage 3, 16-bit model, fp32 gathers: the gatherer rounds the working copy
  std::uint64_t counted_bytes_ = 0;  // the parameter all-gathers of step()
  std::uint64_t taken_bytes_ = 0;    // everything sent up to the last take_stats()
};

}  // namespace dtrain::trainer
