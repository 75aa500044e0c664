// The stand-in backend (backend.h): the CPU backend's ops with the arena open around each.

#include "trainer/kernels/standin/backend.h"

#include <atomic>
#include <cstring>

#include "trainer/common/host_wait.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/standin/arena.h"

namespace dtrain::trainer::kernels {
namespace {

int stream_token = 0;  // compute_stream()'s non-null token
std::atomic<bool> fences_held{false};

class StandinBackend final : public Backend {
 public:
  std::string name() const override { return "cuda-standin"; }
  bool host_accessible() const override { return false; }
  void* compute_stream() const override { return &stream_token; }
  float* allocate(std::size_t count) override {
    return static_cast<float*>(standin_allocate(count * sizeof(float)));
  }
  void release(float* data) override { standin_release(data); }
  void zero(float* data, std::size_t count) override {
    const StandinOpen open;
    cpu().zero(data, count);
  }
  // The waits a GPU's backend makes the host do (kernels/cuda/backend.h) are noted as such (common/host_wait.h).
  void copy_in(void* dst, const void* host, std::size_t bytes) override {
    note_host_wait("copy to the device");
    const StandinOpen open;
    if (bytes > 0) std::memcpy(dst, host, bytes);
  }
  void copy_out(void* host, const void* src, std::size_t bytes) override {
    note_host_wait("copy to the host");
    const StandinOpen open;
    if (bytes > 0) std::memcpy(host, src, bytes);
  }
  void synchronize() override { note_host_wait("synchronize"); }
  void copy_in_async(void* dst, const void* host, std::size_t bytes) override {
    const StandinOpen open;
    if (bytes > 0) std::memcpy(dst, host, bytes);
  }
  // Every op has finished when it returns: each fence is passed as soon as it is recorded, unless fences are held
  // (standin_hold_fences): then only those recorded before the hold are.
  std::uint64_t record_fence() override {
    const std::uint64_t fence = ++fences_;
    if (!fences_held) passed_ = fence;
    return fence;
  }
  bool fence_done(std::uint64_t fence) override {
    if (!fences_held) passed_ = fences_.load();
    return fence <= passed_;
  }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override {
    const StandinOpen open;
    cpu().embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                          int C) override {
    const StandinOpen open;
    cpu().embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
    const StandinOpen open;
    cpu().layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    const StandinOpen open;
    cpu().layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                      int OC) override {
    const StandinOpen open;
    cpu().matmul_forward(out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int C, int OC) override {
    const StandinOpen open;
    cpu().matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) override {
    const StandinOpen open;
    cpu().attention_forward(out, att, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B,
                          int T, int C, int NH) override {
    const StandinOpen open;
    cpu().attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
  }
  std::size_t attention_scratch_size(int B, int T, int C, int NH) const override {
    return cpu().attention_scratch_size(B, T, C, NH);
  }
  void gelu_forward(float* out, const float* inp, std::size_t N) override {
    const StandinOpen open;
    cpu().gelu_forward(out, inp, N);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t N) override {
    const StandinOpen open;
    cpu().gelu_backward(dinp, inp, dout, N);
  }
  void residual_forward(float* out, const float* a, const float* b, std::size_t N) override {
    const StandinOpen open;
    cpu().residual_forward(out, a, b, N);
  }
  float softmax_crossentropy_forward(float* probs, float* losses, const float* logits, const std::int32_t* targets,
                                     int N, int V, int Vp) override {
    if (targets != nullptr) note_host_wait("the mean loss read back");
    const StandinOpen open;
    return cpu().softmax_crossentropy_forward(probs, losses, logits, targets, N, V, Vp);
  }
  void softmax_crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets, float dloss,
                                     int N, int V, int Vp) override {
    const StandinOpen open;
    cpu().softmax_crossentropy_backward(dlogits, probs, targets, dloss, N, V, Vp);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, long t) override {
    const StandinOpen open;
    cpu().adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
  }
  double sum_squares(const float* data, std::size_t n) override {
    note_host_wait("a sum of squares read back");
    const StandinOpen open;
    return cpu().sum_squares(data, n);
  }
  void scale(float* data, std::size_t n, float factor) override {
    const StandinOpen open;
    cpu().scale(data, n, factor);
  }
  void to_half(std::uint16_t* out, const float* in, std::size_t n, Dtype type) override {
    const StandinOpen open;
    cpu().to_half(out, in, n, type);
  }
  void from_half(float* out, const std::uint16_t* in, std::size_t n, Dtype type) override {
    const StandinOpen open;
    cpu().from_half(out, in, n, type);
  }
  void to_half_divided(std::uint16_t* out, const float* in, std::size_t n, float divisor, Dtype type) override {
    const StandinOpen open;
    cpu().to_half_divided(out, in, n, divisor, type);
  }
  void gemm_half(Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const std::uint16_t* A,
                 int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) override {
    const StandinOpen open;
    cpu().gemm_half(type, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void matmul_forward_half(Dtype type, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                           const float* bias, int N, int C, int OC) override {
    const StandinOpen open;
    cpu().matmul_forward_half(type, out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward_half(Dtype type, float* dinp, float* dweight, float* dbias, const float* dout,
                            std::uint16_t* dout_half, const std::uint16_t* inp, const std::uint16_t* weight, int N,
                            int C, int OC) override {
    const StandinOpen open;
    cpu().matmul_backward_half(type, dinp, dweight, dbias, dout, dout_half, inp, weight, N, C, OC);
  }
  bool unscale_and_check(float* data, std::size_t n, float inv_scale) override {
    note_host_wait("the overflow flag read back");
    const StandinOpen open;
    return cpu().unscale_and_check(data, n, inv_scale);
  }

  void softmax_crossentropy_mean(float* mean, float* probs, float* losses, const float* logits,
                                 const std::int32_t* targets, int N, int V, int Vp) override {
    const StandinOpen open;
    *mean = cpu().softmax_crossentropy_forward(probs, losses, logits, targets, N, V, Vp);
  }
  void mean_of(float* out, const float* in, std::size_t n) override {
    const StandinOpen open;
    cpu().mean_of(out, in, n);
  }
  void add_sum_squares(double* acc, const float* data, std::size_t n) override {
    const StandinOpen open;
    cpu().add_sum_squares(acc, data, n);
  }
  void split_double(float* parts, const double* value) override {
    const StandinOpen open;
    cpu().split_double(parts, value);
  }
  void sum_parts(double* out, const float* parts, std::size_t n) override {
    const StandinOpen open;
    cpu().sum_parts(out, parts, n);
  }
  void norm_of(float* norm, const double* sum_sq) override {
    const StandinOpen open;
    cpu().norm_of(norm, sum_sq);
  }
  void clip_to(float* data, std::size_t n, const float* norm, float max_norm) override {
    const StandinOpen open;
    cpu().clip_to(data, n, norm, max_norm);
  }

 private:
  static Backend& cpu() { return cpu_backend(); }
  std::atomic<std::uint64_t> fences_{0};
  std::atomic<std::uint64_t> passed_{0};
};

}  // namespace

void standin_hold_fences(bool hold) { fences_held = hold; }

Backend& standin_backend() {
  static StandinBackend backend;
  return backend;
}

}  // namespace dtrain::trainer::kernels
