#pragma once

// ZeRO-3 (FSDP FULL_SHARD) parameters: every rank keeps only its shard of each unit (shards.h); a unit's parameters
// are all-gathered in place into the model's flat buffer just before the model uses them and released (pages.h)
// just after, through the model's unit hooks (Gpt::UnitHooks). The gather order of one micro-step is known:
//   forward:  0 (embeddings), 1 .. L (layers), L+1 (final LayerNorm)
//   backward: L+1, L .. 1                                      (unit 0 is released after the embedding backward)
// so when gather(u) returns, the all-gather of the next unit in that order is already in flight (forward prefetch,
// and backward prefetch in reverse order), overlapping u's compute. At most two units besides unit 0 are gathered
// or being gathered at once (FSDP's limit_all_gathers). Unit 0 stays gathered from the start of forward to the end
// of backward, as FSDP keeps its root unit: the tied output head reads wte at the end of forward and the start of
// backward. A unit that is next in the order when released (the final LayerNorm between forward and backward)
// stays gathered. While the training thread waits for unit u's all-gather the worker's phase is "all-gather unit u"
// (health/phase.h; forward or backward again after), and the wait counts as exposed communication, not compute
// (trainer/metrics/comm_time.h).
//
// With a 16-bit precision (FSDP's param_dtype) the gathered buffer is the model's 16-bit working copy instead of the
// fp32 parameters, so an all-gather sends half the bytes; once a unit has arrived, the tensors of it that fp32
// kernels read (Gpt::fp32_tensors) are widened into a separate fp32 buffer (Gpt::compute_params), and both are
// released together. The fp32 master stays with the engine: only its owned shards exist on a rank.
// A 16-bit model may also gather its fp32 parameters (--param-dtype fp32): then each gathered unit is rounded into
// the working copy (RoundedCopy), which is released with it, and the model computes exactly as with --zero 0..2.
//
// On a device (the `device` backend, a GPU whose memory the host cannot touch: its host_accessible() is false) the
// buffers are device memory: the widening and rounding run as the backend's ops, and a release gives nothing back
// (there are no host pages to return; a released unit keeps its stale values, which nothing reads before the unit is
// gathered again). So on a GPU the full-size buffers stay allocated and ZeRO-3 saves no parameter memory there yet;
// the gather/release order, the prefetch, the waits and the bytes on the wire are the same as on the host, and
// peak_bytes() counts the gathered units as if released ones were freed. A null device: host memory, as above.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"
#include "trainer/kernels/half.h"
#include "trainer/model/layout.h"
#include "trainer/parallel/zero/shards.h"

namespace dtrain::trainer {

// The 16-bit buffers of a gatherer for 16-bit parameters (top of this file), all in the flat buffer's layout.
struct HalfParams {
  std::uint16_t* half = nullptr;                // the working copy: the owned shards hold this rank's values
  float* wide = nullptr;                        // where gathered units' fp32 tensors are widened to
  kernels::Dtype type = kernels::Dtype::bf16;   // bf16 or fp16
  std::vector<std::vector<ParamRange>> widen;   // per unit: the ranges widened into `wide`
};

// The working copy of a 16-bit model whose fp32 parameters are gathered (top of this file).
struct RoundedCopy {
  std::uint16_t* half = nullptr;               // null: an fp32 model, nothing to round
  kernels::Dtype type = kernels::Dtype::bf16;  // bf16 or fp16
};

class ParamGatherer {
 public:
  // fp32: gathers params (the model's parameter buffer) in place, rounding each unit into `rounded` when given.
  // device: the compute backend whose memory the buffers are when the host cannot touch it (a GPU; top of this
  // file), null for host memory; it must outlive the gatherer.
  ParamGatherer(Communicator& comm, const ZeroShards& shards, float* params, RoundedCopy rounded = {},
                kernels::Backend* device = nullptr);
  // 16-bit: gathers half.half in place and widens into half.wide.
  ParamGatherer(Communicator& comm, const ZeroShards& shards, HalfParams half, kernels::Backend* device = nullptr);
  ParamGatherer(const ParamGatherer&) = delete;
  ParamGatherer& operator=(const ParamGatherer&) = delete;
  ~ParamGatherer();

  // The model's hooks. gather(u) must follow the order above (a new micro-step starts at gather(0));
  // anything else throws std::logic_error.
  void gather(int unit);
  void release(int unit);

  // Every unit gathered (a checkpoint writes the whole model), or every unit released outside the owned shard
  // (after the start's broadcast filled the whole buffer, and after a checkpoint).
  void gather_all();
  void release_all();

  // Bytes sent by all-gathers so far (ring accounting); the largest number of bytes of gathered units (whole
  // slices, unit 0 included) alive at once since the last reset_peak().
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  std::uint64_t peak_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = alive_bytes(); }
  // The gather order of one micro-step (above), for tests.
  const std::vector<int>& order() const { return order_; }

 private:
  enum class State { released, gathering, gathered };
  void issue(int unit);
  void wait(int unit);
  void free(int unit);
  // The host pages of a unit outside the owned shard (pages.h); not on a device.
  void release_pages(int unit);
  void widen(int unit);
  int alive_besides_root() const;
  std::uint64_t alive_bytes() const;

  Communicator& comm_;
  const ZeroShards& shards_;
  float* params_;    // fp32 parameters, or null with 16-bit ones
  HalfParams half_;  // half_.half null with fp32 parameters
  RoundedCopy rounded_;
  kernels::Backend* device_;  // null: host buffers
  std::vector<int> order_;
  std::size_t cursor_;  // index in order_ of the last gather()
  std::vector<State> state_;
  std::vector<std::shared_ptr<Work>> work_;
  std::vector<const char*> phases_;  // "all-gather unit u"
  std::uint64_t bytes_sent_ = 0;
  std::uint64_t peak_bytes_ = 0;
};

}  // namespace dtrain::trainer
