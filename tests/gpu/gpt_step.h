#pragma once

// One GPT-2 124M training step on the CUDA backend, for dtrain-kernel-perf: every Backend call the trainer's step
// makes, in its order, with bf16 matrix products and fp32 master weights. Parameters, their bf16 copy, gradients
// and AdamW's moments are flat buffers (as trainer/model/layout.h lays them out); activations are kept per layer
// for the backward.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainer/kernels/cuda/backend.h"

namespace dtrain::gpu_check {

class GptStep {
 public:
  struct Shape {
    int L = 12, C = 768, NH = 12, T = 1024, V = 50257, Vp = 50304;
  };
  // Seconds of each phase (the stream is synchronised between them).
  struct Times {
    double forward = 0, backward = 0, update = 0;
  };

  GptStep(trainer::kernels::CudaBackend& gpu, int B);
  ~GptStep();
  GptStep(const GptStep&) = delete;
  GptStep& operator=(const GptStep&) = delete;

  Times step();
  const Shape& shape() const { return shape_; }
  float last_loss() const { return loss_; }

 private:
  // One layer's parameters (offsets into the flat buffers) and activations (device pointers).
  struct Layer {
    std::size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *attproj, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch,
        *fch_gelu, *fcproj, *res3;
    std::uint16_t *ln1_h, *atty_h, *ln2_h, *fch_gelu_h;
  };

  void forward();
  void backward();
  void update();
  void layer_forward(Layer& l, const float* x);
  void layer_backward(Layer& l, const float* x);
  std::size_t carve(std::size_t count) { return (params_ += count) - count; }
  // Zeroed device memory, freed with the step.
  void* device(std::size_t bytes);
  float* activation(std::size_t count) { return static_cast<float*>(device(count * sizeof(float))); }
  std::uint16_t* half_activation(std::size_t count) {
    return static_cast<std::uint16_t*>(device(count * sizeof(std::uint16_t)));
  }
  float* p(std::size_t offset) const { return param_ + offset; }
  float* g(std::size_t offset) const { return grad_ + offset; }
  const std::uint16_t* h(std::size_t offset) const { return half_ + offset; }

  trainer::kernels::CudaBackend& gpu_;
  Shape shape_;
  int B_;
  int N_;
  std::size_t params_ = 0;
  std::vector<Layer> layers_;
  std::size_t wte_, wpe_, lnfw_, lnfb_;
  float *param_, *grad_, *m_, *v_;
  std::uint16_t* half_;
  std::int32_t *tokens_, *targets_;
  float *encoded_, *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *probs_, *losses_;
  std::uint16_t *lnf_h_, *dout_half_;
  float *dres_, *dbig_, *dsmall_, *dqkv_, *att_scratch_;
  std::vector<void*> owned_;
  float loss_ = 0;
  long t_ = 0;
};

}  // namespace dtrain::gpu_check
