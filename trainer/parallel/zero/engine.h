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
//   engine.step(lr, t)                                  AdamW on the owned shards; stages 1, 2: all-gather params
//   engine.refresh_working_params()                     16-bit precision: the working copy from the master
// Gradient accumulation, written down: stage 1 keeps full local gradients and communicates once per step, like
// DDP's no_sync; stages 2 and 3 cannot keep a full gradient, so they reduce-scatter every micro-step and accumulate
// into the owned shard (reducer.h says how), sending K times the bytes.
// Stage 3 with a 16-bit precision (FSDP's param_dtype): the fp32 master is the owned shards of the parameter buffer
// (nothing else of it exists on a rank), the model's 16-bit working copy is sharded the same way and is what the
// gatherer all-gathers (half the bytes), refreshed from the owned master shards after each step. With
// --param-dtype fp32 it gathers the fp32 master instead and rounds each gathered unit into the working copy.

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

// What one step measured (metrics).
struct ZeroStepStats {
  std::uint64_t comm_bytes = 0;            // reduce-scatters and all-gathers this rank sent during the step
  std::optional<std::uint64_t> gathered_peak_bytes;  // stage 3: the most bytes of gathered units alive at once
  double hidden_fraction = 1;              // of the last reduce-scatter pass, as DdpStats
};

class ZeroEngine {
 public:
  // stage 1..3; model built with ParamLayout(config, comm.size()) padding (Gpt(config, backend, W)).
  // param_dtype (--param-dtype): what stage 3 all-gathers, fp32 or the model's precision (the default);
  // std::invalid_argument otherwise. fp32 for a 16-bit model gathers the master and rounds each unit into the
  // working copy as it arrives: the model then computes exactly as with stages 0-2, at twice the bytes.
  ZeroEngine(int stage, Communicator& comm, Gpt& model, const AdamWOptions& options);
  ZeroEngine(int stage, Communicator& comm, Gpt& model, const AdamWOptions& options, kernels::Dtype param_dtype);
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  int stage() const { return stage_; }
  const ZeroShards& shards() const { return shards_; }
  AdamW& optimizer() { return optimizer_; }
  ZeroMemory memory() const { return zero_memory(stage_, shards_.padded_params(), shards_.world()); }

  // After every rank holds the whole parameter buffer (the start's broadcast): stage 3 releases the rest.
  void shard_params();
  // The whole fp32 buffer on every rank for a checkpoint (stage 3 gathers; a no-op otherwise), and back.
  void gather_params();
  void release_params();
  // The model's 16-bit working copy from the master: the whole buffer, or with stage 3 the owned shards only.
  void refresh_working_params();
  // AdamW's moments of the whole buffer (buffer layout) gathered from every rank's shards, and the reverse: each
  // rank takes its shards of full moments (resume).
  void gather_moments(std::vector<float>& m, std::vector<float>& v);
  void load_moments(const float* m, const float* v);

  void zero_grad();
  void begin_backward(bool last_micro_step);
  const Gpt::GradsReady& grads_ready() const { return grads_ready_; }
  void finish_backward();
  // torch.nn.utils.clip_grad_norm_ over the shards of all ranks; returns the norm before clipping.
  float clip_grad_norm(float max_norm);
  void step(float lr, long t);
  // The step's measurements; starts counting the next one.
  ZeroStepStats take_stats();

 private:
  int stage_;
  Communicator& comm_;
  Gpt& model_;
  ZeroShards shards_;
  std::vector<ParamSpan> spans_;
  AdamW optimizer_;
  ZeroReducer reducer_;
  std::unique_ptr<ParamGatherer> gatherer_;
  // All-gathers the fp32 parameters' owned shards into the whole buffer and waits; returns the bytes sent.
  std::uint64_t all_gather_master();
  // Releases the fp32 parameters outside the owned shards.
  void release_master();

  Gpt::GradsReady grads_ready_;
  bool sharded_master_ = false;      // stage 3, 16-bit: the gatherer gathers the working copy, not params()
  bool rounded_on_gather_ = false;   // stage 3, 16-bit model, fp32 gathers: the gatherer rounds the working copy
  std::uint64_t counted_bytes_ = 0;  // the parameter all-gathers of step()
  std::uint64_t taken_bytes_ = 0;    // everything sent up to the last take_stats()
};

}  // namespace dtrain::trainer
