#pragma once

// Where each parameter tensor lives in the model's one flat fp32 buffer (gradients mirror it element for element).
//
// In-memory order (the layout contract):
//   wte (Vp, C) | wpe (maxT, C) | layer 0 | layer 1 | ... | layer L-1 | lnfw (C) | lnfb (C)
// and inside each layer, contiguous:
//   ln1w (C) ln1b (C) qkvw (3C, C) qkvb (3C) attprojw (C, C) attprojb (C)
//   ln2w (C) ln2b (C) fcw (4C, C) fcb (4C) fcprojw (C, 4C) fcprojb (C)
// Backward finishes gradients from the end of the buffer towards the start (final LayerNorm, layer L-1, ..., layer
// 0, wpe, wte), which is what DDP buckets taken from the end need (trainer/parallel/ddp/reducer.h).
//
// llm.c's checkpoint stores the same tensors in another order: each kind stacked over all layers
// (wte, wpe, ln1w[L], ln1b[L], qkvw[L], ...). checkpoint_tensors() lists them in that order with their place in
// our buffer, and to_checkpoint_order()/from_checkpoint_order() convert whole buffers both ways.

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "trainer/model/config.h"

namespace dtrain::trainer {

// A contiguous range of the flat buffer.
struct ParamRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// The 12 tensors of one transformer block, in their in-memory order.
enum class LayerTensor { ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb };
inline constexpr int kLayerTensors = 12;

// One tensor as llm.c's checkpoint lists it.
struct TensorInfo {
  std::string name;         // llm.c's name: "wte", "wpe", "ln1w", ..., "fcprojb", "lnfw", "lnfb"
  int layer = -1;           // block index for per-layer tensors, -1 for wte, wpe, lnfw, lnfb
  std::size_t offset = 0;   // first element in our flat buffer
  std::size_t count = 0;    // elements
  std::vector<int> shape;   // row-major, PyTorch's shape (e.g. qkvw: {3C, C})
  bool decay = false;       // 2-D weight: gets AdamW weight decay (nanoGPT: every parameter with dim >= 2)
};

class ParamLayout {
 public:
  explicit ParamLayout(const GptConfig& config);

  const GptConfig& config() const { return config_; }
  std::size_t num_params() const { return total_; }

  ParamRange wte() const { return {0, wte_count_}; }
  ParamRange wpe() const { return {wte_count_, wpe_count_}; }
  ParamRange layer(int l) const;  // the whole block l
  ParamRange layer_tensor(int l, LayerTensor t) const;
  ParamRange lnfw() const { return {total_ - 2 * channels(), channels()}; }
  ParamRange lnfb() const { return {total_ - channels(), channels()}; }

  // Every tensor in llm.c's checkpoint order (16 kinds; per-layer kinds expanded to L entries, layer 0 first).
  const std::vector<TensorInfo>& checkpoint_tensors() const { return tensors_; }
  // The ranges that get weight decay, in increasing offset order, adjacent ones merged.
  std::vector<ParamRange> decay_ranges() const;

  // Reorders a whole buffer (num_params() floats) between our layout and llm.c's checkpoint order.
  void to_checkpoint_order(const float* ours, float* checkpoint) const;
  void from_checkpoint_order(const float* checkpoint, float* ours) const;

 private:
  std::size_t channels() const { return static_cast<std::size_t>(config_.channels); }

  GptConfig config_;
  std::size_t wte_count_ = 0;
  std::size_t wpe_count_ = 0;
  std::array<std::size_t, kLayerTensors> layer_offsets_{};  // within a block
  std::array<std::size_t, kLayerTensors> layer_counts_{};
  std::size_t layer_count_ = 0;  // elements per block
  std::size_t total_ = 0;
  std::vector<TensorInfo> tensors_;
};

}  // namespace dtrain::trainer
