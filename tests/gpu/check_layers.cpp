// Kernel checks of the model's layers: embedding, LayerNorm, fp32 matrix products, attention, GELU, residual,
// softmax + cross-entropy. Backward outputs that accumulate (+=) start from random values on both sides, so the
// accumulation is checked too.

#include <array>

#include "tests/gpu/check_cases.h"

namespace dtrain::gpu_check {
namespace {

using Floats = std::vector<float>;

void embedding(Context& x) {
  for (auto [B, T, C, V] : {std::array{3, 77, 100, 1000}, std::array{4, 1024, 768, 50304}}) {
    const std::string shape = dims({{"B", B}, {"T", T}, {"C", C}, {"V", V}});
    const std::size_t N = std::size_t(B) * T;
    const auto tokens = random_tokens(N, V, 1);
    const Floats wte = random_floats(std::size_t(V) * C, 1, 2), wpe = random_floats(std::size_t(T) * C, 1, 3);
    const Floats dout = random_floats(N * C, 1, 4);
    Floats out(N * C), dwte = random_floats(wte.size(), 1, 5), dwpe = random_floats(wpe.size(), 1, 6);
    DeviceBuffer<std::int32_t> d_tokens(x.gpu, tokens);
    DeviceBuffer<float> d_wte(x.gpu, wte), d_wpe(x.gpu, wpe), d_dout(x.gpu, dout), d_out(x.gpu, out.size());
    DeviceBuffer<float> d_dwte(x.gpu, dwte), d_dwpe(x.gpu, dwpe);
    x.cpu.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    x.gpu.embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C);
    x.report.exact("embedding_forward out", shape, out, d_out.read());
    x.cpu.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    x.gpu.embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C);
    x.report.close("embedding_backward dwte", shape, dwte, d_dwte.read(), kFp32Tol);
    x.report.close("embedding_backward dwpe", shape, dwpe, d_dwpe.read(), kFp32Tol);
  }
}

void layernorm(Context& x) {
  for (auto [N, C] : {std::array{231, 100}, std::array{8192, 768}}) {
    const std::string shape = dims({{"N", N}, {"C", C}});
    const Floats inp = random_floats(std::size_t(N) * C, 2, 11), w = random_floats(C, 1, 12),
                 b = random_floats(C, 1, 13), dout = random_floats(inp.size(), 1, 14);
    Floats out(inp.size()), mean(N), rstd(N), dinp = random_floats(inp.size(), 1, 15),
        dw = random_floats(C, 1, 16), db = random_floats(C, 1, 17);
    DeviceBuffer<float> d_inp(x.gpu, inp), d_w(x.gpu, w), d_b(x.gpu, b), d_dout(x.gpu, dout), d_dinp(x.gpu, dinp),
        d_dw(x.gpu, dw), d_db(x.gpu, db), d_out(x.gpu, out.size()), d_mean(x.gpu, N), d_rstd(x.gpu, N);
    x.cpu.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    x.gpu.layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(), N, C);
    x.report.close("layernorm_forward out", shape, out, d_out.read(), kFp32Tol);
    x.report.close("layernorm_forward mean", shape, mean, d_mean.read(), kFp32Tol);
    x.report.close("layernorm_forward rstd", shape, rstd, d_rstd.read(), kFp32Tol);
    x.cpu.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                             rstd.data(), N, C);
    x.gpu.layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(),
                             d_mean.get(), d_rstd.get(), N, C);
    x.report.close("layernorm_backward dinp (+=)", shape, dinp, d_dinp.read(), kFp32Tol);
    x.report.close("layernorm_backward dweight (+=)", shape, dw, d_dw.read(), kFp32Tol);
    x.report.close("layernorm_backward dbias (+=)", shape, db, d_db.read(), kFp32Tol);
  }
}

void matmul(Context& x) {
  // GPT-2's three product shapes (qkv, fc, fc proj) at B*T = 4096 and an odd one; the odd one without bias and dinp.
  for (auto [N, C, OC] : {std::array{231, 100, 300}, std::array{4096, 768, 2304}, std::array{4096, 768, 3072},
                          std::array{4096, 3072, 768}}) {
    const bool with_bias = N != 231;
    const std::string shape = dims({{"N", N}, {"C", C}, {"OC", OC}}) + (with_bias ? "" : " no bias/dinp");
    const Floats inp = random_floats(std::size_t(N) * C, 1, 21), w = random_floats(std::size_t(OC) * C, 0.1f, 22),
                 bias = random_floats(OC, 1, 23), dout = random_floats(std::size_t(N) * OC, 1, 24);
    Floats out(std::size_t(N) * OC), dinp(inp.size()), dw = random_floats(w.size(), 1, 25),
        db = random_floats(OC, 1, 26);
    DeviceBuffer<float> d_inp(x.gpu, inp), d_w(x.gpu, w), d_bias(x.gpu, bias), d_dout(x.gpu, dout), d_dw(x.gpu, dw),
        d_db(x.gpu, db), d_out(x.gpu, out.size()), d_dinp(x.gpu, dinp.size());
    x.cpu.matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
    x.gpu.matmul_forward(d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_bias.get() : nullptr, N, C, OC);
    x.report.close("matmul_forward out", shape, out, d_out.read(), kFp32Tol);
    x.cpu.matmul_backward(with_bias ? dinp.data() : nullptr, dw.data(), with_bias ? db.data() : nullptr, dout.data(),
                          inp.data(), w.data(), N, C, OC);
    x.gpu.matmul_backward(with_bias ? d_dinp.get() : nullptr, d_dw.get(), with_bias ? d_db.get() : nullptr,
                          d_dout.get(), d_inp.get(), d_w.get(), N, C, OC);
    if (with_bias) x.report.close("matmul_backward dinp", shape, dinp, d_dinp.read(), kFp32Tol);
    x.report.close("matmul_backward dweight (+=)", shape, dw, d_dw.read(), kFp32Tol);
    if (with_bias) x.report.close("matmul_backward dbias (+=)", shape, db, d_db.read(), kFp32Tol);
  }
}

void attention(Context& x) {
  // Head sizes 32, 48 (not a multiple of the warp), 64, 128; T not a multiple of the 8-row or 32-key tiles.
  for (auto [B, T, C, NH] : {std::array{2, 77, 96, 3}, std::array{1, 100, 96, 2}, std::array{2, 130, 256, 4},
                             std::array{1, 45, 256, 2}, std::array{2, 1024, 768, 12}}) {
    const std::string shape = dims({{"B", B}, {"T", T}, {"C", C}, {"NH", NH}});
    const std::size_t N = std::size_t(B) * T;
    const Floats qkv = random_floats(N * 3 * C, 1, 31), dout = random_floats(N * C, 1, 32);
    Floats out(N * C), att(std::size_t(B) * NH * T * T), dqkv(N * 3 * C);
    Floats scratch(x.cpu.attention_scratch_size(B, T, C, NH));
    DeviceBuffer<float> d_qkv(x.gpu, qkv), d_dout(x.gpu, dout), d_out(x.gpu, out.size()), d_dqkv(x.gpu, dqkv.size());
    DeviceBuffer<float> d_att(x.gpu, att.size()), d_scratch(x.gpu, x.gpu.attention_scratch_size(B, T, C, NH));
    x.cpu.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    x.gpu.attention_forward(d_out.get(), d_att.get(), d_qkv.get(), B, T, C, NH);
    x.report.close("attention_forward out", shape, out, d_out.read(), kFp32Tol);
    x.cpu.attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    x.gpu.attention_backward(d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_att.get(), B, T, C, NH);
    x.report.close("attention_backward dqkv", shape, dqkv, d_dqkv.read(), kFp32Tol);
  }
}

void pointwise(Context& x) {
  const std::size_t n = 1000003;
  const std::string shape = dims({{"n", long(n)}});
  const Floats inp = random_floats(n, 4, 41), b = random_floats(n, 1, 42), dout = random_floats(n, 1, 43);
  Floats out(n), dinp(n);
  DeviceBuffer<float> d_inp(x.gpu, inp), d_b(x.gpu, b), d_dout(x.gpu, dout), d_out(x.gpu, n), d_dinp(x.gpu, n);
  x.cpu.gelu_forward(out.data(), inp.data(), n);
  x.gpu.gelu_forward(d_out.get(), d_inp.get(), n);
  x.report.close("gelu_forward", shape, out, d_out.read(), kFp32Tol);
  x.cpu.gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  x.gpu.gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n);
  x.report.close("gelu_backward", shape, dinp, d_dinp.read(), kFp32Tol);
  x.cpu.residual_forward(out.data(), inp.data(), b.data(), n);
  x.gpu.residual_forward(d_out.get(), d_inp.get(), d_b.get(), n);
  x.report.exact("residual_forward", shape, out, d_out.read());
}

void crossentropy(Context& x) {
  for (auto [N, V, Vp] : {std::array{37, 1000, 1024}, std::array{1024, 50257, 50304}}) {
    const std::string shape = dims({{"N", N}, {"V", V}, {"Vp", Vp}});
    const Floats logits = random_floats(std::size_t(N) * Vp, 8, 51);
    const auto targets = random_tokens(N, V, 52);
    const float dloss = 1.0f / N;
    Floats probs(logits.size()), losses(N);
    DeviceBuffer<float> d_logits(x.gpu, logits), d_probs(x.gpu, probs.size()), d_losses(x.gpu, N);
    DeviceBuffer<std::int32_t> d_targets(x.gpu, targets);
    const float loss = x.cpu.softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(), targets.data(),
                                                          N, V, Vp);
    const float d_loss = x.gpu.softmax_crossentropy_forward(d_probs.get(), d_losses.get(), d_logits.get(),
                                                            d_targets.get(), N, V, Vp);
    x.report.close("softmax_crossentropy_forward probs", shape, probs, d_probs.read(), kFp32Tol);
    x.report.close("softmax_crossentropy_forward losses", shape, losses, d_losses.read(), kFp32Tol);
    x.report.scalar("softmax_crossentropy_forward mean loss", shape, loss, d_loss, kFp32Tol);
    // The same mean left on the device (a step that reads nothing back): the same kernels, the same bits.
    DeviceBuffer<float> d_mean(x.gpu, 1);
    x.gpu.softmax_crossentropy_mean(d_mean.get(), d_probs.get(), d_losses.get(), d_logits.get(), d_targets.get(), N,
                                    V, Vp);
    x.report.exact("softmax_crossentropy_mean", shape, Floats{d_loss}, d_mean.read());
    x.report.scalar("softmax_crossentropy_forward no targets", shape, 0.0,
                    x.gpu.softmax_crossentropy_forward(d_probs.get(), nullptr, d_logits.get(), nullptr, N, V, Vp),
                    0.0);
    // In place, as the model calls it (dlogits aliases probs).
    x.cpu.softmax_crossentropy_backward(probs.data(), probs.data(), targets.data(), dloss, N, V, Vp);
    x.gpu.softmax_crossentropy_backward(d_probs.get(), d_probs.get(), d_targets.get(), dloss, N, V, Vp);
    x.report.close("softmax_crossentropy_backward dlogits", shape, probs, d_probs.read(), kFp32Tol);
  }
}

}  // namespace

std::vector<Case> layer_cases() {
  return {{"embedding", embedding}, {"layernorm", layernorm}, {"matmul", matmul},
          {"attention", attention}, {"gelu/residual", pointwise}, {"softmax_crossentropy", crossentropy}};
}

}  // namespace dtrain::gpu_check
