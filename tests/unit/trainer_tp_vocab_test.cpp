// The vocabulary-parallel embedding and cross-entropy (trainer/model/vocab_parallel.h) on 2 and 4 Gloo ranks
// (threads of this process) against the CPU backend's unsplit ops on the whole vocabulary: the same embeddings once
// the slices are summed, the same losses, probabilities and logit gradients, with a padded vocabulary (V = 250 of
// Vp = 256, so the last slice holds padding columns that take no part) and targets in every slice. And the gradient
// norm over a tensor-parallel group (tp/grad_norm.h): the whole model's, with replicated tensors counted once.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/gloo_ranks.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/model/layout.h"
#include "trainer/parallel/tp/grad_norm.h"
#include "trainer/model/vocab_parallel.h"

using namespace dtrain::trainer;

namespace trainer_tp_vocab_test {

constexpr int B = 2, T = 5, C = 8, V = 250, Vp = 256, N = B * T;

std::vector<float> randoms(std::size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> out(n);
  for (float& x : out) x = u(rng);
  return out;
}

std::vector<std::int32_t> tokens(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> out(N);
  for (auto& t : out) t = static_cast<std::int32_t>(rng() % V);
  out[0] = 0;
  out[1] = V - 1;  // the last real id, in the last slice
  return out;
}

double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1e-6, std::abs(double(b[i]))));
  return worst;
}

TEST_CASE("the vocabulary-parallel cross-entropy gives the whole softmax's losses, probabilities and gradients") {
  const std::vector<float> logits = randoms(std::size_t(N) * Vp, 6.0f, 1);
  const std::vector<std::int32_t> targets = tokens(2);
  const float dloss = 0.37f;
  std::vector<float> probs(logits.size()), losses(N);
  const float mean = kernels::cpu_backend().softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(),
                                                                         targets.data(), N, V, Vp);
  std::vector<float> dlogits(logits.size());
  kernels::cpu_backend().softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), dloss, N, V, Vp);
  for (int size : {2, 4}) {
    GlooRanks ranks("tp-vocab-" + std::to_string(size));
    on_ranks(ranks, size, "ce", [&](int rank, GlooCommunicator& comm) {
      const VocabSlice slice{rank * Vp / size, Vp / size, V};
      std::vector<float> mine(std::size_t(N) * slice.count), my_probs(mine.size()), my_losses(N);
      for (int n = 0; n < N; ++n)
        for (int v = 0; v < slice.count; ++v) mine[n * slice.count + v] = logits[n * Vp + slice.start + v];
      const float got = vocab_parallel_crossentropy_forward(comm, my_probs.data(), my_losses.data(), mine.data(),
                                                            targets.data(), N, slice);
      CHECK(got == doctest::Approx(mean).epsilon(1e-6));
      CHECK(worst_relative(my_losses, losses) < 1e-5);
      std::vector<float> want_probs, want_d;
      for (int n = 0; n < N; ++n)
        for (int v = 0; v < slice.count; ++v) {
          want_probs.push_back(probs[n * Vp + slice.start + v]);
          want_d.push_back(dlogits[n * Vp + slice.start + v]);
        }
      CHECK(worst_relative(my_probs, want_probs) < 1e-5);
      vocab_parallel_crossentropy_backward(my_probs.data(), my_probs.data(), targets.data(), dloss, N, slice);
      double worst = 0;
      for (std::size_t i = 0; i < want_d.size(); ++i)
        worst = std::max(worst, std::abs(double(my_probs[i]) - want_d[i]));
      CHECK(worst < 1e-6);
    });
  }
}

TEST_CASE("the slices' embeddings summed over the group are the whole embedding, and so are their gradients") {
  const std::vector<float> wte = randoms(std::size_t(Vp) * C, 1.0f, 3), wpe = randoms(std::size_t(T) * C, 1.0f, 4);
  const std::vector<std::int32_t> ids = tokens(5);
  std::vector<float> whole(std::size_t(N) * C);
  kernels::cpu_backend().embedding_forward(whole.data(), ids.data(), wte.data(), wpe.data(), B, T, C);
  const std::vector<float> dout = randoms(whole.size(), 1.0f, 6);
  std::vector<float> dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  kernels::cpu_backend().embedding_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), B, T, C);
  const int size = 2;
  std::vector<float> sum(whole.size(), 0.0f), dwte_parts(wte.size(), 0.0f);
  for (int rank = 0; rank < size; ++rank) {
    const VocabSlice slice{rank * Vp / size, Vp / size, V};
    const float* my_wte = wte.data() + std::size_t(slice.start) * C;
    std::vector<float> out(whole.size());
    slice_embedding_forward(out.data(), ids.data(), my_wte, rank == 0 ? wpe.data() : nullptr, B, T, C, slice);
    for (std::size_t i = 0; i < out.size(); ++i) sum[i] += out[i];
    std::vector<float> my_dwpe(wpe.size(), 0.0f);
    slice_embedding_backward(dwte_parts.data() + std::size_t(slice.start) * C, my_dwpe.data(), dout.data(),
                             ids.data(), B, T, C, slice);
    CHECK(my_dwpe == dwpe);  // every rank computes wpe's whole gradient: the tensor is replicated
  }
  CHECK(sum == whole);  // one nonzero term per element besides wpe's: exact
  CHECK(dwte_parts == dwte);
}

}  // namespace trainer_tp_vocab_test

namespace trainer_tp_grad_norm_test {

TEST_CASE("the tensor-parallel sum of squares counts every element of the whole model once") {
  const GptConfig config{16, 250, 256, 2, 4, 32};
  const ParamLayout whole_layout(config);
  const std::vector<float> whole = trainer_tp_vocab_test::randoms(whole_layout.num_params(), 1.0f, 9);
  double want = 0;
  for (float g : whole) want += double(g) * g;
  for (int size : {1, 2, 4}) {
    GlooRanks ranks("tp-norm-" + std::to_string(size));
    on_ranks(ranks, size, "norm", [&](int rank, GlooCommunicator& comm) {
      const ParamLayout layout(config, 1, {size, rank});
      std::vector<float> grads(layout.buffer_size());
      layout.take_slices(whole.data(), grads.data());
      const double got = tensor_parallel_sum_squares(kernels::cpu_backend(), comm, layout, grads.data());
      CHECK(got == doctest::Approx(want).epsilon(1e-9));
    });
  }
}

}  // namespace trainer_tp_grad_norm_test
