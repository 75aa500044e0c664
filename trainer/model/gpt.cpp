#include "trainer/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/model/activations.h"
#include "trainer/model/host_mirror.h"
#include "trainer/model/vocab_parallel.h"

namespace dtrain::trainer {

Gpt::Gpt(const GptConfig& config, kernels::Backend& backend, int unit_multiple, kernels::Dtype precision,
         BufferSource* buffers, TensorParallel tp, PipelineStage stage)
    : layout_(config, unit_multiple, tp, stage),
      backend_(backend),
      own_buffers_(buffers == nullptr ? std::make_unique<BackendBuffers>(backend) : nullptr),
      buffers_(buffers == nullptr ? *own_buffers_ : *buffers),
      precision_(precision),
      sets_(1) {
  if (tp.size > 1 && !backend.host_accessible())
    throw std::invalid_argument("Gpt: tensor parallelism runs on host backends only so far (the vocabulary-parallel "
                                "embedding and cross-entropy read host memory); '" + backend.name() + "' is not one");
  params_ = buffers_.allocate(layout_.buffer_size(), "the parameter buffer");
  compute_ = params_;
  grads_ = buffers_.allocate(layout_.buffer_size(), "the gradient buffer");
  if (precision_ != kernels::Dtype::fp32)
    params_half_ = buffers_.allocate_half(layout_.buffer_size(), "the 16-bit working copy of the parameters");
}

Gpt::Gpt(const GptConfig& config) : Gpt(config, kernels::cpu_backend()) {}

Gpt::~Gpt() {
  acts_.reset();
  sets_.clear();
  backend_.release(logits_);
  buffers_.release_half(params_half_);
  buffers_.release(grads_);
  if (compute_ != params_) backend_.release(compute_);
  buffers_.release(params_);
}

void Gpt::refresh_working_params() {
  if (params_half_ != nullptr) backend_.to_half(params_half_, params_, buffer_size(), precision_);
}

void Gpt::refresh_working_params(ParamRange range) {
  if (params_half_ != nullptr)
    backend_.to_half(params_half_ + range.offset, params_ + range.offset, range.count, precision_);
}

void Gpt::read_params_from_working_copy() {
  if (params_half_ == nullptr)
    throw std::logic_error("Gpt::read_params_from_working_copy: the model is fp32 and has no 16-bit working copy; "
                           "build it with precision bf16 or fp16");
  if (compute_ == params_) compute_ = backend_.allocate(buffer_size());
}

std::vector<ParamRange> Gpt::fp32_tensors(int unit) const {
  if (unit == 0) return {layout_.wte(), layout_.wpe()};
  if (unit == layout_.num_units() - 1) return {layout_.lnfw(), layout_.lnfb()};
  if (!layout_.has_layer(unit - 1)) return {};  // another pipeline stage's layer
  std::vector<ParamRange> ranges;
  for (LayerTensor t : {LayerTensor::ln1w, LayerTensor::ln1b, LayerTensor::qkvb, LayerTensor::attprojb,
                        LayerTensor::ln2w, LayerTensor::ln2b, LayerTensor::fcb, LayerTensor::fcprojb})
    ranges.push_back(layout_.layer_tensor(unit - 1, t));
  return ranges;
}

float* Gpt::staging(MatmulInput& x, int l) {
  return x.f32 != nullptr ? x.f32 + l * x.stride : acts_->dbig;
}

void Gpt::stage_done(MatmulInput& x, int l, std::size_t count) {
  if (x.h16 != nullptr) backend_.to_half(x.h16 + l * x.stride, acts_->dbig, count, precision_);
}

void Gpt::linear(float* out, const MatmulInput& x, int l, std::size_t weight, const float* bias, int N, int C,
                 int OC) {
  if (x.f32 != nullptr) {
    backend_.matmul_forward(out, x.f32 + l * x.stride, params_ + weight, bias, N, C, OC);
  } else {
    backend_.matmul_forward_half(precision_, out, x.h16 + l * x.stride, params_half_ + weight, bias, N, C, OC);
  }
}

void Gpt::linear_backward(float* dinp, std::size_t weight, float* dbias, const float* dout, const MatmulInput& x,
                          int l, int N, int C, int OC) {
  if (x.f32 != nullptr) {
    backend_.matmul_backward(dinp, grads_ + weight, dbias, dout, x.f32 + l * x.stride, params_ + weight, N, C, OC);
  } else {
    backend_.matmul_backward_half(precision_, dinp, grads_ + weight, dbias, dout, acts_->dout_half,
                                  x.h16 + l * x.stride, params_half_ + weight, N, C, OC);
  }
}

void Gpt::set_recompute(Recompute recompute) {
  if (recompute == recompute_) return;
  recompute_ = recompute;
  set_activation_sets(activation_sets());  // sized anew, for what is kept, at the next forward
}

std::size_t Gpt::activation_bytes() const {
  std::size_t floats = 0, bt = 0;
  auto add = [&](const std::unique_ptr<Activations>& set) {
    if (!set) return;
    floats += set->owned_count + set->att_scratch_count;
    bt = std::max(bt, set->capacity_bt);
  };
  add(acts_);
  for (const auto& set : sets_) add(set);
  if (logits_ != nullptr) floats += bt * static_cast<std::size_t>(widths().vocab);  // one for every set
  return floats * sizeof(float);
}

void Gpt::init_weights(std::uint64_t seed) {
  HostMirror mirror(backend_, params_, buffer_size(), HostMirror::Read::no);
  if (layout_.whole()) {
    init_layout(layout_, mirror.data(), seed);
  } else {  // this rank's slices (and stage) of the whole model's initialisation
    const ParamLayout whole(config());
    std::vector<float> params(whole.buffer_size()), ordered(whole.num_params());
    init_layout(whole, params.data(), seed);
    whole.to_checkpoint_order(params.data(), ordered.data());
    std::fill_n(mirror.data(), buffer_size(), 0.0f);
    layout_.take_slices(ordered.data(), mirror.data());
  }
  mirror.commit();
}

void Gpt::init_layout(const ParamLayout& layout, float* params, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Box-Muller on 53-bit uniforms: the same numbers on every platform (std::normal_distribution is not specified).
  auto normal = [&rng](float* out, std::size_t count, double stddev) {
    constexpr double kTwoPi = 6.283185307179586;
    for (std::size_t i = 0; i < count; i += 2) {
      const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
      const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      out[i] = static_cast<float>(stddev * r * std::cos(kTwoPi * u2));
      if (i + 1 < count) out[i + 1] = static_cast<float>(stddev * r * std::sin(kTwoPi * u2));
    }
  };
  const GptConfig& c = layout.config();
  const double residual_std = 0.02 / std::sqrt(2.0 * c.num_layers);
  std::fill_n(params, layout.buffer_size(), 0.0f);
  normal(params, static_cast<std::size_t>(c.vocab_size) * c.channels, 0.02);  // padded rows stay 0
  normal(params + layout.wpe().offset, layout.wpe().count, 0.02);
  auto fill = [params](ParamRange r, float value) { std::fill_n(params + r.offset, r.count, value); };
  for (int l = 0; l < c.num_layers; ++l) {
    auto range = [&](LayerTensor t) { return layout.layer_tensor(l, t); };
    fill(range(LayerTensor::ln1w), 1.0f);
    fill(range(LayerTensor::ln2w), 1.0f);
    normal(params + range(LayerTensor::qkvw).offset, range(LayerTensor::qkvw).count, 0.02);
    normal(params + range(LayerTensor::attprojw).offset, range(LayerTensor::attprojw).count, residual_std);
    normal(params + range(LayerTensor::fcw).offset, range(LayerTensor::fcw).count, 0.02);
    normal(params + range(LayerTensor::fcprojw).offset, range(LayerTensor::fcprojw).count, residual_std);
  }
  fill(layout.lnfw(), 1.0f);
}

// Any shape within the capacity fits (activations.h); a larger one regrows every buffer.
void Gpt::ensure_activations(int B, int T) {
  if (static_cast<std::size_t>(B) * T % static_cast<std::size_t>(shards()) != 0)
    throw std::invalid_argument("Gpt: sequence parallelism splits the " + std::to_string(B) + " x " +
                                std::to_string(T) + " tokens of a micro-batch over " + std::to_string(shards()) +
                                " tensor-parallel ranks, which does not divide them; choose --batch-size and "
                                "--seq-len whose product divides by --tp");
  const std::size_t need_bt = static_cast<std::size_t>(B) * T, need_att = need_bt * T;
  if (!acts_ || need_bt > acts_->capacity_bt || need_att > acts_->capacity_att) {
    const std::size_t BT = std::max(need_bt, acts_ ? acts_->capacity_bt : 0);
    const std::size_t BTT = std::max(need_att, acts_ ? acts_->capacity_att : 0);
    acts_.reset();
    backend_.release(logits_);
    logits_ = nullptr;
    acts_ = std::make_unique<Activations>(backend_, config(), layout_.chunk_layers(), widths(), precision_,
                                          recompute_, BT, BTT, shards());
    if (stage().last()) logits_ = backend_.allocate(BT * widths().vocab);
  }
  acts_->B = B;
  acts_->T = T;
  acts_->att_stride = static_cast<std::size_t>(B) * widths().heads * T * T;
}

void Gpt::check_and_size(const std::int32_t* inputs, const std::int32_t* targets, int B, int T) {
  const GptConfig& c = config();
  if (B <= 0 || T <= 0 || T > c.max_seq_len)
    throw std::invalid_argument("Gpt::forward: batch " + std::to_string(B) + " x " + std::to_string(T) +
                                " is not allowed; B must be positive and T in [1, max_seq_len = " +
                                std::to_string(c.max_seq_len) + "]");
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  auto check_tokens = [&](const std::int32_t* tokens, const char* what) {
    for (std::size_t i = 0; i < BT; ++i)
      if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
        throw std::invalid_argument(std::string("Gpt::forward: ") + what + " token " + std::to_string(tokens[i]) +
                                    " at batch row " + std::to_string(i / T) + ", position " +
                                    std::to_string(i % T) + " is outside the vocabulary [0, " +
                                    std::to_string(c.vocab_size) + "); check the data against the model's vocab");
  };
  check_tokens(inputs, "input");
  if (targets != nullptr) check_tokens(targets, "target");
  ensure_activations(B, T);
}

float Gpt::forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T) {
  check_and_size(inputs, targets, B, T);
  Activations& a = *acts_;
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  backend_.copy_in(a.inputs, inputs, BT * sizeof(std::int32_t));
  a.has_targets = targets != nullptr;
  if (a.has_targets) backend_.copy_in(a.targets, targets, BT * sizeof(std::int32_t));
  forward_layers();
  if (!a.has_targets) return std::numeric_limits<float>::quiet_NaN();
  return heads() ? loss_forward() : 0.0f;
}

float Gpt::loss_forward() {
  Activations& a = *acts_;
  const int N = a.B * a.T;
  const GptConfig& c = config();
  if (tp_size() > 1)
    return vocab_parallel_crossentropy_forward(*tp_group_, a.probs, a.losses, logits_, a.targets, N, vocab_slice());
  return backend_.softmax_crossentropy_forward(a.probs, a.losses, logits_, a.targets, N, c.vocab_size,
                                               c.padded_vocab_size);
}

void Gpt::forward_batch(const std::int32_t* tokens, int B, int T, float* loss) {
  check_and_size(tokens, tokens + 1, B, T);
  Activations& a = *acts_;
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  backend_.copy_in_async(a.inputs, tokens, BT * sizeof(std::int32_t));
  backend_.copy_in_async(a.targets, tokens + 1, BT * sizeof(std::int32_t));
  a.has_targets = true;
  forward_layers();
  const GptConfig& c = config();
  if (!heads()) return backend_.zero(loss, 1);
  if (tp_size() > 1) {  // a host backend (the constructor's check): the loss is host memory
    *loss = loss_forward();
    return;
  }
  backend_.softmax_crossentropy_mean(loss, a.probs, a.losses, logits_, a.targets, static_cast<int>(BT), c.vocab_size,
                                     c.padded_vocab_size);
}

void Gpt::forward_layers() {
  const GptConfig& c = config();
  Activations& a = *acts_;
  const std::size_t BT = static_cast<std::size_t>(a.B) * a.T;
  const int C = c.channels;
  const int N = static_cast<int>(BT);
  kernels::Backend& k = backend_;
  const float* p = compute_;
  gather(0);
  if (embeds()) embed();  // later chunks' input was received into a.encoded (stage_input())
  const int first = layout_.chunk_first_layer(chunk_), end = first + layout_.chunk_layers();
  const std::size_t rows = BT / static_cast<std::size_t>(shards());  // this rank's tokens of the residual stream
  for (int l = first; l < end; ++l) {
    gather(1 + l);
    const float* residual = l == first ? a.encoded : a.residual3 + (local(l) - 1) * rows * C;
    if (sequence_parallel()) {
      forward_block_sp(l, residual);
    } else {
      forward_block(l, residual);
    }
    release(1 + l);
  }
  if (!heads()) return;
  const float* last = a.residual3 + (layout_.chunk_layers() - 1) * rows * C;
  const int lnf_unit = layout_.num_units() - 1;
  gather(lnf_unit);
  if (sequence_parallel()) {
    layernorm_gather(a.lnf, 0, a.lnf_mean, a.lnf_rstd, last, p + layout_.lnfw().offset, p + layout_.lnfb().offset,
                     "tp-all-gather (the final LayerNorm, sequence parallel)");
  } else {
    k.layernorm_forward(staging(a.lnf, 0), a.lnf_mean, a.lnf_rstd, last, p + layout_.lnfw().offset,
                        p + layout_.lnfb().offset, N, C);
    stage_done(a.lnf, 0, BT * C);
  }
  release(lnf_unit);
  linear(logits_, a.lnf, 0, layout_.wte().offset, nullptr, N, C, widths().vocab);
}

void Gpt::embed() {
  Activations& a = *acts_;
  const float* wte = compute_ + layout_.wte().offset;
  const float* wpe = compute_ + layout_.wpe().offset;
  const int C = config().channels;
  if (tp_size() == 1) return backend_.embedding_forward(a.encoded, a.inputs, wte, wpe, a.B, a.T, C);
  if (sequence_parallel()) return embed_sp();
  slice_embedding_forward(a.encoded, a.inputs, wte, row_bias(wpe), a.B, a.T, C, vocab_slice());
  tp_allreduce(a.encoded, static_cast<std::size_t>(a.B) * a.T * C, "tp-allreduce (the vocabulary-parallel embedding)");
}

void Gpt::forward_block(int l, const float* residual) {
  const GptConfig& c = config();
  Activations& a = *acts_;
  const Widths wd = widths();
  const int B = a.B, T = a.T, C = c.channels;
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  const int N = static_cast<int>(BT);
  kernels::Backend& k = backend_;
  const float* p = compute_;
  const int s = slot(l);
  auto w = [&](LayerTensor t) { return p + layout_.layer_tensor(l, t).offset; };
  auto at = [&](LayerTensor t) { return layout_.layer_tensor(l, t).offset; };
  float* qkv = a.qkv + s * BT * wd.qkv;
  float* residual2 = a.residual2 + s * BT * C;
  float* fch = a.fch + s * BT * wd.fc;
  k.layernorm_forward(staging(a.ln1, s), a.ln1_mean + s * BT, a.ln1_rstd + s * BT, residual, w(LayerTensor::ln1w),
                      w(LayerTensor::ln1b), N, C);
  stage_done(a.ln1, s, BT * C);
  linear(qkv, a.ln1, s, at(LayerTensor::qkvw), w(LayerTensor::qkvb), N, C, wd.qkv);
  k.attention_forward(staging(a.atty, s), a.att + att_slot(l) * a.att_stride, qkv, B, T, wd.att, wd.heads);
  stage_done(a.atty, s, BT * wd.att);
  linear(a.proj, a.atty, s, at(LayerTensor::attprojw), row_bias(w(LayerTensor::attprojb)), N, wd.att, C);
  tp_allreduce(a.proj, BT * C, "tp-allreduce (the attention's row-parallel output)");
  k.residual_forward(residual2, residual, a.proj, BT * C);
  k.layernorm_forward(staging(a.ln2, s), a.ln2_mean + s * BT, a.ln2_rstd + s * BT, residual2, w(LayerTensor::ln2w),
                      w(LayerTensor::ln2b), N, C);
  stage_done(a.ln2, s, BT * C);
  linear(fch, a.ln2, s, at(LayerTensor::fcw), w(LayerTensor::fcb), N, C, wd.fc);
  k.gelu_forward(staging(a.fch_gelu, s), fch, BT * wd.fc);
  stage_done(a.fch_gelu, s, BT * wd.fc);
  linear(a.proj, a.fch_gelu, s, at(LayerTensor::fcprojw), row_bias(w(LayerTensor::fcprojb)), N, wd.fc, C);
  tp_allreduce(a.proj, BT * C, "tp-allreduce (the MLP's row-parallel output)");
  k.residual_forward(a.residual3 + local(l) * BT * C, residual2, a.proj, BT * C);
}

}  // namespace dtrain::trainer
