// Gpt's sequence parallelism (gpt.h; Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models"): with TensorParallel::sequence_parallel each rank of the tensor-parallel group holds 1/T of the tokens of
// the residual stream and computes the LayerNorms, the residual adds and the LayerNorm statistics on them alone. The
// tokens are the B*T positions taken in order, cut into T equal runs (every op outside attention and the matrix
// products is per token, so any split is exact; Megatron-LM cuts the sequence dimension of its [s, b, h] layout,
// which is the same thing for one sequence). Each block half all-gathers its LayerNorm's output before the
// column-parallel product and reduce-scatters the row-parallel product's partial sums after it (in place of the
// allreduce: the same bytes, the same sum), and backward does the reverse. The LayerNorm weights' gradients are each
// rank's part of the sum over tokens, summed over the group (for this backward's share only, so that accumulation over
// micro-batches stays exact). What the all-gathers produce (the matrix products' inputs) is kept whole for backward,
// as Megatron-LM's default keeps it.

#include <string>

#include "trainer/comm/communicator.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/model/activations.h"
#include "trainer/model/gpt.h"
#include "trainer/model/vocab_parallel.h"

namespace dtrain::trainer {

std::size_t Gpt::shard_tokens() const {
  const Activations& a = current("shard_tokens");
  return static_cast<std::size_t>(a.B) * a.T / static_cast<std::size_t>(shards());
}

void Gpt::tp_all_gather(const float* shard, float* whole, std::size_t count, const char* what) {
  wait_collective(*tp_group_->all_gather(shard, whole, count), what);
}

void Gpt::tp_reduce_scatter(const float* whole, float* shard, std::size_t count, const char* what) {
  wait_collective(*tp_group_->reduce_scatter(whole, shard, count), what);
}

// LayerNorm of this rank's tokens `in` (n of them) into x's layer-l buffer at this rank's run of tokens, then
// all-gathered over the group, so that x holds the LayerNorm of every token.
void Gpt::layernorm_gather(MatmulInput& x, int l, float* mean, float* rstd, const float* in, const float* weight,
                           const float* bias, const char* what) {
  const std::size_t n = shard_tokens(), C = static_cast<std::size_t>(config().channels);
  const std::size_t mine = static_cast<std::size_t>(layout_.tensor_parallel().rank) * n * C;
  float* out = x.f32 != nullptr ? x.f32 + l * x.stride + mine : acts_->dbig;
  backend_.layernorm_forward(out, mean, rstd, in, weight, bias, static_cast<int>(n), static_cast<int>(C));
  if (x.f32 != nullptr) return tp_all_gather(out, x.f32 + l * x.stride, n * C, what);
  std::uint16_t* half = x.h16 + l * x.stride;
  backend_.to_half(half + mine, out, n * C, precision_);
  wait_collective(*tp_group_->all_gather_half(half + mine, half, n * C), what);
}

// LayerNorm's backward on this rank's tokens: d input added to dresidual; the weight's and bias's gradients (2C
// floats, adjacent: ln1w ln1b, ln2w ln2b, lnfw lnfb) summed over the group and added to the gradient buffer at `at`.
void Gpt::layernorm_backward_shard(std::size_t at, const float* dout, const float* in, const float* weight,
                                   const float* mean, const float* rstd, const char* what) {
  Activations& a = *acts_;
  const int n = static_cast<int>(shard_tokens()), C = config().channels;
  backend_.zero(a.dln, 2 * static_cast<std::size_t>(C));
  backend_.layernorm_backward(a.dresidual, a.dln, a.dln + C, dout, in, weight, mean, rstd, n, C);
  tp_allreduce(a.dln, 2 * static_cast<std::size_t>(C), what);
  backend_.residual_forward(grads_ + at, grads_ + at, a.dln, 2 * static_cast<std::size_t>(C));
}

void Gpt::forward_block_sp(int l, const float* residual) {
  const GptConfig& c = config();
  Activations& a = *acts_;
  const Widths wd = widths();
  const int B = a.B, T = a.T, C = c.channels;
  const std::size_t BT = static_cast<std::size_t>(B) * T, n = shard_tokens();
  const std::size_t mine = static_cast<std::size_t>(layout_.tensor_parallel().rank) * n * C;
  const int N = static_cast<int>(BT);
  kernels::Backend& k = backend_;
  const int s = slot(l);
  auto w = [&](LayerTensor t) { return compute_ + layout_.layer_tensor(l, t).offset; };
  auto at = [&](LayerTensor t) { return layout_.layer_tensor(l, t).offset; };
  float* qkv = a.qkv + s * BT * wd.qkv;
  float* residual2 = a.residual2 + s * n * C;
  float* fch = a.fch + s * BT * wd.fc;
  layernorm_gather(a.ln1, s, a.ln1_mean + s * n, a.ln1_rstd + s * n, residual, w(LayerTensor::ln1w),
                   w(LayerTensor::ln1b), "tp-all-gather (the attention's LayerNorm, sequence parallel)");
  linear(qkv, a.ln1, s, at(LayerTensor::qkvw), w(LayerTensor::qkvb), N, C, wd.qkv);
  k.attention_forward(staging(a.atty, s), a.att + att_slot(l) * a.att_stride, qkv, B, T, wd.att, wd.heads);
  stage_done(a.atty, s, BT * wd.att);
  linear(a.proj, a.atty, s, at(LayerTensor::attprojw), row_bias(w(LayerTensor::attprojb)), N, wd.att, C);
  tp_reduce_scatter(a.proj, a.proj + mine, n * C, "tp-reduce-scatter (the attention's output, sequence parallel)");
  k.residual_forward(residual2, residual, a.proj + mine, n * C);
  layernorm_gather(a.ln2, s, a.ln2_mean + s * n, a.ln2_rstd + s * n, residual2, w(LayerTensor::ln2w),
                   w(LayerTensor::ln2b), "tp-all-gather (the MLP's LayerNorm, sequence parallel)");
  linear(fch, a.ln2, s, at(LayerTensor::fcw), w(LayerTensor::fcb), N, C, wd.fc);
  k.gelu_forward(staging(a.fch_gelu, s), fch, BT * wd.fc);
  stage_done(a.fch_gelu, s, BT * wd.fc);
  linear(a.proj, a.fch_gelu, s, at(LayerTensor::fcprojw), row_bias(w(LayerTensor::fcprojb)), N, wd.fc, C);
  tp_reduce_scatter(a.proj, a.proj + mine, n * C, "tp-reduce-scatter (the MLP's output, sequence parallel)");
  k.residual_forward(a.residual3 + local(l) * n * C, residual2, a.proj + mine, n * C);
}

void Gpt::backward_block_sp(int l, const std::function<void(std::size_t)>& ready_from) {
  Activations& a = *acts_;
  const Widths wd = widths();
  const int B = a.B, T = a.T, C = config().channels;
  const std::size_t BT = static_cast<std::size_t>(B) * T, n = shard_tokens();
  const std::size_t mine = static_cast<std::size_t>(layout_.tensor_parallel().rank) * n * C;
  const int N = static_cast<int>(BT);
  kernels::Backend& k = backend_;
  auto w = [&](LayerTensor t) { return compute_ + layout_.layer_tensor(l, t).offset; };
  auto dw = [&](LayerTensor t) { return grads_ + layout_.layer_tensor(l, t).offset; };
  auto start = [&](LayerTensor t) { return layout_.layer_tensor(l, t).offset; };
  const int s = slot(l);
  const float* residual = local(l) == 0 ? a.encoded : a.residual3 + (local(l) - 1) * n * C;
  const float* qkv = a.qkv + s * BT * wd.qkv;
  const float* fch = a.fch + s * BT * wd.fc;
  float* att = a.att + att_slot(l) * a.att_stride;

  gather(1 + l);
  if (recompute_ == Recompute::full) forward_block_sp(l, residual);
  // The MLP branch: d of its output, every token's (proj), from this rank's (dresidual).
  tp_all_gather(a.dresidual, a.proj, n * C, "tp-all-gather (the MLP's output gradient, sequence parallel)");
  linear_backward(a.dbig, start(LayerTensor::fcprojw), dw(LayerTensor::fcprojb), a.proj, a.fch_gelu, s, N, wd.fc, C);
  ready_from(start(LayerTensor::fcprojw));
  k.gelu_backward(a.dbig, fch, a.dbig, BT * wd.fc);
  linear_backward(a.dbtc, start(LayerTensor::fcw), dw(LayerTensor::fcb), a.dbig, a.ln2, s, N, C, wd.fc);
  ready_from(start(LayerTensor::fcw));
  tp_reduce_scatter(a.dbtc, a.dbtc + mine, n * C, "tp-reduce-scatter (the MLP's input gradient, sequence parallel)");
  layernorm_backward_shard(start(LayerTensor::ln2w), a.dbtc + mine, a.residual2 + s * n * C, w(LayerTensor::ln2w),
                           a.ln2_mean + s * n, a.ln2_rstd + s * n, "tp-allreduce (the MLP's LayerNorm gradients)");
  ready_from(start(LayerTensor::ln2w));
  // The attention branch.
  tp_all_gather(a.dresidual, a.proj, n * C, "tp-all-gather (the attention's output gradient, sequence parallel)");
  linear_backward(a.dbtc, start(LayerTensor::attprojw), dw(LayerTensor::attprojb), a.proj, a.atty, s, N, wd.att, C);
  ready_from(start(LayerTensor::attprojw));
  if (recompute_ == Recompute::selective) k.attention_forward(a.proj, att, qkv, B, T, wd.att, wd.heads);
  k.attention_backward(a.dbig, a.att_scratch, a.dbtc, qkv, att, B, T, wd.att, wd.heads);
  linear_backward(a.dbtc, start(LayerTensor::qkvw), dw(LayerTensor::qkvb), a.dbig, a.ln1, s, N, C, wd.qkv);
  ready_from(start(LayerTensor::qkvw));
  tp_reduce_scatter(a.dbtc, a.dbtc + mine, n * C,
                    "tp-reduce-scatter (the attention's input gradient, sequence parallel)");
  layernorm_backward_shard(start(LayerTensor::ln1w), a.dbtc + mine, residual, w(LayerTensor::ln1w),
                           a.ln1_mean + s * n, a.ln1_rstd + s * n,
                           "tp-allreduce (the attention's LayerNorm gradients)");
  release(1 + l);
  ready_from(start(LayerTensor::ln1w));
}

// The vocabulary-parallel embedding's partial sums of every token, reduce-scattered: this rank's tokens, summed.
void Gpt::embed_sp() {
  Activations& a = *acts_;
  const float* wte = compute_ + layout_.wte().offset;
  const float* wpe = compute_ + layout_.wpe().offset;
  slice_embedding_forward(a.proj, a.inputs, wte, row_bias(wpe), a.B, a.T, config().channels, vocab_slice());
  tp_reduce_scatter(a.proj, a.encoded, shard_tokens() * config().channels,
                    "tp-reduce-scatter (the vocabulary-parallel embedding, sequence parallel)");
}

// The embedding's backward from this rank's d encoded (dresidual), all-gathered first.
void Gpt::embed_backward_sp() {
  Activations& a = *acts_;
  const int C = config().channels;
  tp_all_gather(a.dresidual, a.proj, shard_tokens() * C, "tp-all-gather (the embedding's gradient)");
  slice_embedding_backward(grads_ + layout_.wte().offset, grads_ + layout_.wpe().offset, a.proj, a.inputs, a.B, a.T, C,
                           vocab_slice());
}

}  // namespace dtrain::trainer
