// Gpt's backward pass and its tensor-parallel collectives (gpt.h).

#include <algorithm>
#include <stdexcept>
#include <string>

#include "trainer/comm/communicator.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/model/activations.h"
#include "trainer/model/gpt.h"
#include "trainer/model/vocab_parallel.h"

namespace dtrain::trainer {

Gpt::Widths Gpt::widths() const {
  const GptConfig& c = config();
  const int T = tp_size();
  return {3 * c.channels / T, c.channels / T, 4 * c.channels / T, c.num_heads / T, c.padded_vocab_size / T};
}

VocabSlice Gpt::vocab_slice() const {
  const int count = widths().vocab;
  return {layout_.tensor_parallel().rank * count, count, config().vocab_size};
}

void Gpt::set_tensor_parallel_group(Communicator* group) {
  const TensorParallel& tp = layout_.tensor_parallel();
  if (group != nullptr && (group->size() != tp.size || group->rank() != tp.rank))
    throw std::invalid_argument("Gpt: the tensor-parallel communicator is rank " + std::to_string(group->rank()) +
                                " of " + std::to_string(group->size()) + ", but the model was built for rank " +
                                std::to_string(tp.rank) + " of " + std::to_string(tp.size));
  tp_group_ = group;
}

void Gpt::tp_allreduce(float* data, std::size_t count, const char* what) {
  if (tp_size() == 1) return;
  if (tp_group_ == nullptr)
    throw std::logic_error("Gpt: a tensor-parallel model (T = " + std::to_string(tp_size()) +
                           ") needs set_tensor_parallel_group() before forward()");
  wait_collective(*tp_group_->allreduce(data, count), what);
}

void Gpt::zero_grad() { backend_.zero(grads_, buffer_size()); }

void Gpt::backward(float loss_scale, const GradsReady& grads_ready) {
  if (!acts_ || !acts_->has_targets)
    throw std::logic_error("Gpt::backward needs a forward() with targets first");
  Activations& a = *acts_;
  const GptConfig& c = config();
  const Widths wd = widths();
  const int B = a.B, T = a.T, C = c.channels;
  kernels::Backend& k = backend_;
  float* g = grads_;

  // Everything from `unreported` to the end of the buffer has been handed to grads_ready.
  std::size_t unreported = chunk_grads_end();
  auto ready_from = [&](std::size_t offset) {
    if (offset >= unreported) return;  // nothing new (another stage's tensors)
    if (grads_ready) grads_ready(offset, unreported - offset);
    unreported = offset;
  };

  a.ensure_scratch(k.attention_scratch_size(B, T, wd.att, wd.heads));
  // A stage before the last starts from d output, received into dresidual (stage_output_grad()).
  if (heads()) head_backward(loss_scale, ready_from);
  const int first = layout_.chunk_first_layer(chunk_);
  for (int l = first + layout_.chunk_layers() - 1; l >= first; --l) {
    if (sequence_parallel()) {
      backward_block_sp(l, ready_from);
    } else {
      backward_block(l, ready_from);
    }
  }
  if (embeds()) {
    if (sequence_parallel()) {
      embed_backward_sp();
    } else if (tp_size() > 1) {
      slice_embedding_backward(g + layout_.wte().offset, g + layout_.wpe().offset, a.dresidual, a.inputs, B, T, C,
                               vocab_slice());
    } else {
      k.embedding_backward(g + layout_.wte().offset, g + layout_.wpe().offset, a.dresidual, a.inputs, B, T, C);
    }
  }
  // A stage after the first leaves d input in dresidual (stage_input_grad()).
  release(0);
  if (chunk_ == 0) ready_from(layout_.wpe().offset);  // wte last: the last stage's copy got the head's gradient first
  ready_from(chunk_grads_begin());
  // probs were overwritten by dlogits: another backward() needs another forward().
  a.has_targets = false;
}

// The last stage's loss, head and final LayerNorm backward: d residual3 of the last layer into dresidual.
void Gpt::head_backward(float loss_scale, const std::function<void(std::size_t)>& ready_from) {
  Activations& a = *acts_;
  const GptConfig& c = config();
  const Widths wd = widths();
  const int C = c.channels;
  const std::size_t BT = static_cast<std::size_t>(a.B) * a.T;
  const int N = static_cast<int>(BT);
  kernels::Backend& k = backend_;
  float* dlogits = a.probs;
  const float dloss = loss_scale / static_cast<float>(N);
  if (tp_size() > 1) {
    vocab_parallel_crossentropy_backward(dlogits, a.probs, a.targets, dloss, N, vocab_slice());
  } else {
    k.softmax_crossentropy_backward(dlogits, a.probs, a.targets, dloss, N, c.vocab_size, c.padded_vocab_size);
  }
  linear_backward(a.dbtc, layout_.wte().offset, nullptr, dlogits, a.lnf, 0, N, C, wd.vocab);
  const int lnf_unit = layout_.num_units() - 1;
  if (sequence_parallel()) {  // this rank's tokens of d lnf's output, summed over the group
    const std::size_t n = shard_tokens(), mine = static_cast<std::size_t>(layout_.tensor_parallel().rank) * n * C;
    tp_reduce_scatter(a.dbtc, a.dbtc + mine, n * C, "tp-reduce-scatter (the output head's input gradient)");
    k.zero(a.dresidual, n * C);
    const float* last = a.residual3 + static_cast<std::size_t>(layout_.chunk_layers() - 1) * n * C;
    gather(lnf_unit);
    layernorm_backward_shard(layout_.lnfw().offset, a.dbtc + mine, last, compute_ + layout_.lnfw().offset,
                             a.lnf_mean, a.lnf_rstd, "tp-allreduce (the final LayerNorm's gradients)");
    release(lnf_unit);
    ready_from(layout_.lnfw().offset);
    return;
  }
  tp_allreduce(a.dbtc, BT * C, "tp-allreduce (the output head's input gradient)");
  k.zero(a.dresidual, BT * C);
  const float* last = a.residual3 + static_cast<std::size_t>(layout_.chunk_layers() - 1) * BT * C;
  gather(lnf_unit);
  k.layernorm_backward(a.dresidual, grads_ + layout_.lnfw().offset, grads_ + layout_.lnfb().offset, a.dbtc, last,
                       compute_ + layout_.lnfw().offset, a.lnf_mean, a.lnf_rstd, N, C);
  release(lnf_unit);
  ready_from(layout_.lnfw().offset);
}

void Gpt::backward_block(int l, const std::function<void(std::size_t)>& ready_from) {
  Activations& a = *acts_;
  const Widths wd = widths();
  const int B = a.B, T = a.T, C = config().channels;
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  const int N = static_cast<int>(BT);
  kernels::Backend& k = backend_;
  auto w = [&](LayerTensor t) { return compute_ + layout_.layer_tensor(l, t).offset; };
  auto dw = [&](LayerTensor t) { return grads_ + layout_.layer_tensor(l, t).offset; };
  auto start = [&](LayerTensor t) { return layout_.layer_tensor(l, t).offset; };
  const int s = slot(l);
  const float* residual = local(l) == 0 ? a.encoded : a.residual3 + (local(l) - 1) * BT * C;
  const float* qkv = a.qkv + s * BT * wd.qkv;
  const float* residual2 = a.residual2 + s * BT * C;
  const float* fch = a.fch + s * BT * wd.fc;
  float* att = a.att + att_slot(l) * a.att_stride;

  gather(1 + l);
  // Full recompute: the block's forward again, from its kept input, into slot 0 (dbig and proj, which it uses as
  // scratch, hold nothing backward needs here).
  if (recompute_ == Recompute::full) forward_block(l, residual);
  // dresidual holds d residual3[l]; the MLP branch. The row-parallel projection's bias gradient is every rank's (its
  // output gradient is the same on every rank); the column-parallel one's input gradient is summed over the group.
  linear_backward(a.dbig, start(LayerTensor::fcprojw), dw(LayerTensor::fcprojb), a.dresidual, a.fch_gelu, s, N,
                  wd.fc, C);
  ready_from(start(LayerTensor::fcprojw));
  k.gelu_backward(a.dbig, fch, a.dbig, BT * wd.fc);
  linear_backward(a.dbtc, start(LayerTensor::fcw), dw(LayerTensor::fcb), a.dbig, a.ln2, s, N, C, wd.fc);
  ready_from(start(LayerTensor::fcw));
  tp_allreduce(a.dbtc, BT * C, "tp-allreduce (the MLP's column-parallel input gradient)");
  k.layernorm_backward(a.dresidual, dw(LayerTensor::ln2w), dw(LayerTensor::ln2b), a.dbtc, residual2,
                       w(LayerTensor::ln2w), a.ln2_mean + s * BT, a.ln2_rstd + s * BT, N, C);
  ready_from(start(LayerTensor::ln2w));
  // dresidual now holds d residual2[l]; the attention branch.
  linear_backward(a.dbtc, start(LayerTensor::attprojw), dw(LayerTensor::attprojb), a.dresidual, a.atty, s, N,
                  wd.att, C);
  ready_from(start(LayerTensor::attprojw));
  // Selective recompute: this layer's attention probabilities again, from the kept q, k, v (the output, which
  // atty keeps, goes to proj's scratch).
  if (recompute_ == Recompute::selective) k.attention_forward(a.proj, att, qkv, B, T, wd.att, wd.heads);
  k.attention_backward(a.dbig, a.att_scratch, a.dbtc, qkv, att, B, T, wd.att, wd.heads);
  linear_backward(a.dbtc, start(LayerTensor::qkvw), dw(LayerTensor::qkvb), a.dbig, a.ln1, s, N, C, wd.qkv);
  ready_from(start(LayerTensor::qkvw));
  tp_allreduce(a.dbtc, BT * C, "tp-allreduce (the attention's column-parallel input gradient)");
  k.layernorm_backward(a.dresidual, dw(LayerTensor::ln1w), dw(LayerTensor::ln1b), a.dbtc, residual,
                       w(LayerTensor::ln1w), a.ln1_mean + s * BT, a.ln1_rstd + s * BT, N, C);
  release(1 + l);
  ready_from(start(LayerTensor::ln1w));
}

}  // namespace dtrain::trainer
