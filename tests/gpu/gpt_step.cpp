#include "tests/gpu/gpt_step.h"

#include <chrono>

#include "tests/gpu/check_buffers.h"

namespace dtrain::gpu_check {

using trainer::kernels::Dtype;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GptStep::GptStep(trainer::kernels::CudaBackend& gpu, int B) : gpu_(gpu), B_(B), N_(B * shape_.T) {
  const std::size_t C = shape_.C, N = N_;
  layers_.resize(shape_.L);
  wte_ = carve(shape_.Vp * C);
  wpe_ = carve(shape_.T * C);
  for (Layer& l : layers_) {
    l.ln1w = carve(C), l.ln1b = carve(C), l.qkvw = carve(3 * C * C), l.qkvb = carve(3 * C);
    l.attprojw = carve(C * C), l.attprojb = carve(C), l.ln2w = carve(C), l.ln2b = carve(C);
    l.fcw = carve(4 * C * C), l.fcb = carve(4 * C), l.fcprojw = carve(4 * C * C), l.fcprojb = carve(C);
  }
  lnfw_ = carve(C);
  lnfb_ = carve(C);
  param_ = activation(params_);
  grad_ = activation(params_);
  m_ = activation(params_);
  v_ = activation(params_);
  half_ = half_activation(params_);
  gpu_.copy_to_device(param_, random_floats(params_, 0.02f, 7).data(), params_ * sizeof(float));
  gpu_.to_half(half_, param_, params_, Dtype::bf16);
  for (Layer& l : layers_) {
    l.ln1 = activation(N * C), l.ln1_mean = activation(N), l.ln1_rstd = activation(N), l.qkv = activation(N * 3 * C);
    l.atty = activation(N * C), l.lse = activation(N * shape_.NH), l.attproj = activation(N * C);
    l.res2 = activation(N * C), l.ln2 = activation(N * C), l.ln2_mean = activation(N), l.ln2_rstd = activation(N);
    l.fch = activation(N * 4 * C), l.fch_gelu = activation(N * 4 * C), l.fcproj = activation(N * C);
    l.res3 = activation(N * C);
    l.ln1_h = half_activation(N * C), l.atty_h = half_activation(N * C), l.ln2_h = half_activation(N * C);
    l.fch_gelu_h = half_activation(N * 4 * C);
  }
  const std::vector<std::int32_t> tokens = random_tokens(N + 1, shape_.V, 8);
  tokens_ = static_cast<std::int32_t*>(device(N * sizeof(std::int32_t)));
  targets_ = static_cast<std::int32_t*>(device(N * sizeof(std::int32_t)));
  gpu_.copy_to_device(tokens_, tokens.data(), N * sizeof(std::int32_t));
  gpu_.copy_to_device(targets_, tokens.data() + 1, N * sizeof(std::int32_t));
  encoded_ = activation(N * C), lnf_ = activation(N * C), lnf_mean_ = activation(N), lnf_rstd_ = activation(N);
  logits_ = activation(N * shape_.Vp), probs_ = activation(N * shape_.Vp), losses_ = activation(N);
  lnf_h_ = half_activation(N * C), dout_half_ = half_activation(N * shape_.Vp);
  dres_ = activation(N * C), dbig_ = activation(N * 4 * C), dsmall_ = activation(N * C);
  dqkv_ = activation(N * 3 * C);
  att_scratch_ = activation(gpu_.attention_scratch_size(B_, shape_.T, shape_.C, shape_.NH));
}

GptStep::~GptStep() {
  for (void* data : owned_) gpu_.release_bytes(data);
}

void* GptStep::device(std::size_t bytes) {
  owned_.push_back(gpu_.allocate_bytes(bytes));
  return owned_.back();
}

GptStep::Times GptStep::step() {
  Times times;
  auto start = std::chrono::steady_clock::now();
  forward();  // ends with the loss read, a host synchronisation
  times.forward = seconds_since(start);
  start = std::chrono::steady_clock::now();
  backward();
  gpu_.synchronize();
  times.backward = seconds_since(start);
  start = std::chrono::steady_clock::now();
  update();
  gpu_.synchronize();
  times.update = seconds_since(start);
  return times;
}

void GptStep::forward() {
  const int C = shape_.C;
  gpu_.embedding_forward(encoded_, tokens_, p(wte_), p(wpe_), B_, shape_.T, C);
  const float* x = encoded_;
  for (Layer& l : layers_) {
    layer_forward(l, x);
    x = l.res3;
  }
  gpu_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, p(lnfw_), p(lnfb_), N_, C);
  gpu_.to_half(lnf_h_, lnf_, static_cast<std::size_t>(N_) * C, Dtype::bf16);
  gpu_.matmul_forward_half(Dtype::bf16, logits_, lnf_h_, h(wte_), nullptr, N_, C, shape_.Vp);
  loss_ = gpu_.softmax_crossentropy_forward(probs_, losses_, logits_, targets_, N_, shape_.V, shape_.Vp);
}

void GptStep::layer_forward(Layer& l, const float* x) {
  const int C = shape_.C;
  const std::size_t NC = static_cast<std::size_t>(N_) * C;
  gpu_.layernorm_forward(l.ln1, l.ln1_mean, l.ln1_rstd, x, p(l.ln1w), p(l.ln1b), N_, C);
  gpu_.to_half(l.ln1_h, l.ln1, NC, Dtype::bf16);
  gpu_.matmul_forward_half(Dtype::bf16, l.qkv, l.ln1_h, h(l.qkvw), p(l.qkvb), N_, C, 3 * C);
  gpu_.attention_forward(l.atty, l.lse, l.qkv, B_, shape_.T, C, shape_.NH);
  gpu_.to_half(l.atty_h, l.atty, NC, Dtype::bf16);
  gpu_.matmul_forward_half(Dtype::bf16, l.attproj, l.atty_h, h(l.attprojw), p(l.attprojb), N_, C, C);
  gpu_.residual_forward(l.res2, x, l.attproj, NC);
  gpu_.layernorm_forward(l.ln2, l.ln2_mean, l.ln2_rstd, l.res2, p(l.ln2w), p(l.ln2b), N_, C);
  gpu_.to_half(l.ln2_h, l.ln2, NC, Dtype::bf16);
  gpu_.matmul_forward_half(Dtype::bf16, l.fch, l.ln2_h, h(l.fcw), p(l.fcb), N_, C, 4 * C);
  gpu_.gelu_forward(l.fch_gelu, l.fch, 4 * NC);
  gpu_.to_half(l.fch_gelu_h, l.fch_gelu, 4 * NC, Dtype::bf16);
  gpu_.matmul_forward_half(Dtype::bf16, l.fcproj, l.fch_gelu_h, h(l.fcprojw), p(l.fcprojb), N_, 4 * C, C);
  gpu_.residual_forward(l.res3, l.res2, l.fcproj, NC);
}

void GptStep::backward() {
  const int C = shape_.C;
  gpu_.zero(grad_, params_);
  gpu_.softmax_crossentropy_backward(probs_, probs_, targets_, 1.0f / N_, N_, shape_.V, shape_.Vp);
  gpu_.matmul_backward_half(Dtype::bf16, dsmall_, g(wte_), nullptr, probs_, dout_half_, lnf_h_, h(wte_), N_, C,
                            shape_.Vp);
  gpu_.zero(dres_, static_cast<std::size_t>(N_) * C);
  gpu_.layernorm_backward(dres_, g(lnfw_), g(lnfb_), dsmall_, layers_.back().res3, p(lnfw_), lnf_mean_, lnf_rstd_,
                          N_, C);
  for (int i = shape_.L - 1; i >= 0; --i) layer_backward(layers_[i], i == 0 ? encoded_ : layers_[i - 1].res3);
  gpu_.embedding_backward(g(wte_), g(wpe_), dres_, tokens_, B_, shape_.T, C);
}

// dres_ holds the gradient of the layer's output (res3) on entry and of its input x on return: each residual
// passes it through, and each LayerNorm backward adds its branch's part (+=).
void GptStep::layer_backward(Layer& l, const float* x) {
  const int C = shape_.C;
  gpu_.matmul_backward_half(Dtype::bf16, dbig_, g(l.fcprojw), g(l.fcprojb), dres_, dout_half_, l.fch_gelu_h,
                            h(l.fcprojw), N_, 4 * C, C);
  gpu_.gelu_backward(dbig_, l.fch, dbig_, static_cast<std::size_t>(N_) * 4 * C);
  gpu_.matmul_backward_half(Dtype::bf16, dsmall_, g(l.fcw), g(l.fcb), dbig_, dout_half_, l.ln2_h, h(l.fcw), N_, C,
                            4 * C);
  gpu_.layernorm_backward(dres_, g(l.ln2w), g(l.ln2b), dsmall_, l.res2, p(l.ln2w), l.ln2_mean, l.ln2_rstd, N_, C);
  gpu_.matmul_backward_half(Dtype::bf16, dsmall_, g(l.attprojw), g(l.attprojb), dres_, dout_half_, l.atty_h,
                            h(l.attprojw), N_, C, C);
  gpu_.attention_backward(dqkv_, att_scratch_, dsmall_, l.qkv, l.lse, B_, shape_.T, C, shape_.NH);
  gpu_.matmul_backward_half(Dtype::bf16, dsmall_, g(l.qkvw), g(l.qkvb), dqkv_, dout_half_, l.ln1_h, h(l.qkvw), N_, C,
                            3 * C);
  gpu_.layernorm_backward(dres_, g(l.ln1w), g(l.ln1b), dsmall_, x, p(l.ln1w), l.ln1_mean, l.ln1_rstd, N_, C);
}

void GptStep::update() {
  gpu_.adamw_update(param_, grad_, m_, v_, params_, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t_);
  gpu_.to_half(half_, param_, params_, Dtype::bf16);
}

}  // namespace dtrain::gpu_check
