#pragma once

// Gpt's forward activations kept for backward (per-layer ones stacked over L, or one layer of those that backward
// recomputes: gpt.h's Recompute), plus backward's scratch buffers.
// Buffers are laid out for the current (B, T) from their start, so any shape within the capacity fits; Gpt grows
// them (never shrinks) when a forward needs more.
//
// Mixed precision (Gpt's precision bf16 or fp16): the inputs of the matrix products (ln1, atty, ln2, fch_gelu, lnf)
// are only read again by those products' backward, which takes them in 16 bits, so they are stored in 16 bits
// (MatmulInput). The rest stays fp32, as autocast's fp32 ops need it: the residual stream (encoded, residual2,
// residual3; LayerNorm's input), qkv and att (attention's softmax), fch (GELU's input), the LayerNorm statistics,
// probs and the logits.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainer/kernels/backend.h"
#include "trainer/model/config.h"
#include "trainer/model/gpt.h"

namespace dtrain::trainer {

// An activation that feeds a matrix product: fp32 (f32) with fp32 precision, else 16-bit values (h16).
struct MatmulInput {
  float* f32 = nullptr;
  std::uint16_t* h16 = nullptr;
  std::size_t stride = 0;  // values per layer
};

struct Gpt::Activations {
  // The per-layer buffers hold one layer where `recompute` recomputes them (gpt.h's Recompute): full keeps L
  // layers of the residual stream (residual3) only, selective keeps one layer of att.
  // widths: the model's (a tensor-parallel rank's local widths of q/k/v, attention, MLP, heads and logits). layers:
  // how many the model runs (a pipeline stage's; L below), indexed from 0 (Gpt::local). shards: sequence parallelism's
  // split of the B*T tokens (1 without): the residual stream (encoded, residual2, residual3, dresidual) and the
  // LayerNorm statistics hold BT / shards tokens, this rank's; everything else all of them.
  Activations(kernels::Backend& backend, const GptConfig& config, int layers, const Widths& widths,
              kernels::Dtype precision, Recompute recompute, std::size_t BT, std::size_t BTT, int shards = 1);
  ~Activations();
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;

  // Grows att_scratch to at least `count` floats.
  void ensure_scratch(std::size_t count);

  kernels::Backend& backend;
  std::vector<float*> owned;
  std::size_t owned_count = 0;      // floats in `owned` (16-bit buffers count half a float per value)
  int B = 0, T = 0;                 // shape of the last forward()
  std::size_t att_stride = 0;       // floats of att per layer at that shape: B * NH * T * T
  std::size_t capacity_bt = 0;      // B*T the buffers hold
  std::size_t capacity_att = 0;     // B*T*T the attention buffers hold (per head and layer)
  // The last forward's token ids (B*T each), in the backend's memory (copied in by forward); not in owned_count.
  std::int32_t* inputs = nullptr;
  std::int32_t* targets = nullptr;
  bool has_targets = false;

  // Shapes with T = 1; a tensor-parallel rank holds 3C/T of qkv, C/T of atty, NH/T heads of att, 4C/T of fch
  // and fch_gelu, and Vp/T of probs (Gpt::Widths).
  float* encoded = nullptr;     // (B, T, C)
  MatmulInput ln1;              // (L, B, T, C)
  float* ln1_mean = nullptr;    // (L, B, T)
  float* ln1_rstd = nullptr;    // (L, B, T)
  float* qkv = nullptr;         // (L, B, T, 3C)
  MatmulInput atty;             // (L, B, T, C)
  float* att = nullptr;         // (L, B, NH, T, T)
  float* residual2 = nullptr;   // (L, B, T, C)
  MatmulInput ln2;              // (L, B, T, C)
  float* ln2_mean = nullptr;    // (L, B, T)
  float* ln2_rstd = nullptr;    // (L, B, T)
  float* fch = nullptr;         // (L, B, T, 4C)
  MatmulInput fch_gelu;         // (L, B, T, 4C)
  float* residual3 = nullptr;   // (L, B, T, C)
  MatmulInput lnf;              // (B, T, C)
  float* lnf_mean = nullptr;    // (B, T)
  float* lnf_rstd = nullptr;    // (B, T)
  float* probs = nullptr;       // (B, T, Vp); becomes dlogits in backward
  float* losses = nullptr;      // (B, T)
  float* proj = nullptr;        // (B, T, C): projection output before the residual add
  float* dresidual = nullptr;   // (B, T, C)
  float* dln = nullptr;         // (2C): sequence parallelism's LayerNorm gradients before their sum over the group
  float* dbtc = nullptr;        // (B, T, C)
  float* dbig = nullptr;        // (B, T, max(C, 3C, 4C)): dfch, and dqkv; in forward, 16-bit inputs' fp32 staging
  std::uint16_t* dout_half = nullptr;  // (B, T, max(Vp, 4C, 3C, C)): 16-bit products' rounded dout; 16 bits only
  float* att_scratch = nullptr;  // attention_backward's scratch; its size depends on the thread count too
  std::size_t att_scratch_count = 0;

 private:
  float* take(std::size_t count);
  std::uint16_t* take_half(std::size_t count);
  MatmulInput take_input(kernels::Dtype precision, std::size_t layers, std::size_t stride);
};

}  // namespace dtrain::trainer
