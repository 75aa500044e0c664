// Kernel checks of the optimizer, the reductions and mixed precision: AdamW, sum of squares, scale, the 16-bit
// conversions (with the special values half.h defines: NaN, infinities, overflow, subnormals), 16-bit matrix
// products in every transpose, the loss scaler's unscale, and the step's scalars that stay on the device.

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/gpu/check_cases.h"
#include "trainer/kernels/half.h"

namespace dtrain::gpu_check {
namespace {

using Floats = std::vector<float>;
using Halves = std::vector<std::uint16_t>;
using trainer::kernels::Dtype;

void adamw(Context& x) {
  const std::size_t n = 1000003;
  Floats p = random_floats(n, 1, 61), m(n), v(n);
  DeviceBuffer<float> d_p(x.gpu, p), d_m(x.gpu, n), d_v(x.gpu, n);
  for (long t = 1; t <= 3; ++t) {  // three steps: the bias corrections change with t
    const Floats g = random_floats(n, 1, 62 + static_cast<std::uint32_t>(t));
    DeviceBuffer<float> d_g(x.gpu, g);
    x.cpu.adamw_update(p.data(), g.data(), m.data(), v.data(), n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    x.gpu.adamw_update(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
  }
  const std::string shape = dims({{"n", long(n)}, {"steps", 3}});
  x.report.close("adamw_update params", shape, p, d_p.read(), kFp32Tol);
  x.report.close("adamw_update m", shape, m, d_m.read(), kFp32Tol);
  x.report.close("adamw_update v", shape, v, d_v.read(), kFp32Tol);
}

void reductions(Context& x) {
  for (std::size_t n : {std::size_t(1), std::size_t(1000003), std::size_t(124475904)}) {
    const std::string shape = dims({{"n", long(n)}});
    Floats data = random_floats(n, 1, 71);
    DeviceBuffer<float> d_data(x.gpu, data);
    // Both sum in double; only the order differs, so far below fp32's tolerance.
    x.report.scalar("sum_squares", shape, x.cpu.sum_squares(data.data(), n), x.gpu.sum_squares(d_data.get(), n),
                    1e-9);
    x.cpu.scale(data.data(), n, 0.37f);
    x.gpu.scale(d_data.get(), n, 0.37f);
    x.report.exact("scale", shape, data, d_data.read());
  }
}

// Random values over fp32's whole exponent range plus the special values, so every branch of the rounding runs.
Floats conversion_inputs() {
  Floats values = random_floats(1 << 20, 1, 81);
  const Floats exponents = random_floats(values.size(), 1, 82);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::ldexp(values[i], int(exponents[i] * 140));
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65520.0f, 65519.99f, 6e-8f,
                            3e-8f, 1e-45f, std::numeric_limits<float>::max(), 3.3895314e38f, 1.0f + 0x1.0p-8f};
  values.insert(values.end(), std::begin(specials), std::end(specials));
  return values;
}

void conversions(Context& x) {
  const Floats in = conversion_inputs();
  const std::string shape = dims({{"n", long(in.size())}});
  DeviceBuffer<float> d_in(x.gpu, in), d_back(x.gpu, in.size());
  DeviceBuffer<std::uint16_t> d_half(x.gpu, in.size());
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    const std::string name = trainer::kernels::dtype_name(type);
    Halves half(in.size());
    Floats back(in.size());
    x.cpu.to_half(half.data(), in.data(), in.size(), type);
    x.gpu.to_half(d_half.get(), d_in.get(), in.size(), type);
    x.report.exact("to_half " + name, shape, half, d_half.read());
    x.cpu.from_half(back.data(), half.data(), half.size(), type);
    x.gpu.from_half(d_back.get(), d_half.get(), half.size(), type);
    x.report.exact("from_half " + name, shape, back, d_back.read());
    for (float world : {2.0f, 3.0f}) {  // DDP's 16-bit bucket divided by the world (3: not a power of two)
      x.cpu.to_half_divided(half.data(), in.data(), in.size(), world, type);
      x.gpu.to_half_divided(d_half.get(), d_in.get(), in.size(), world, type);
      x.report.exact("to_half_divided " + name + " / " + std::to_string(int(world)), shape, half, d_half.read());
    }
  }
}

Halves halves(std::size_t n, float scale, std::uint32_t seed, Dtype type) {
  const Floats values = random_floats(n, scale, seed);
  Halves out(n);
  trainer::kernels::to_half(out.data(), values.data(), n, type);
  return out;
}

void gemm_half(Context& x) {
  const int M = 77, N = 130, K = 200, pad = 3;  // leading dimensions larger than the rows they hold
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      const Halves A = halves(std::size_t(ta ? K : M) * lda, 1, 91, type);
      const Halves B = halves(std::size_t(tb ? N : K) * ldb, 1, 92, type);
      Floats C = random_floats(std::size_t(M) * ldc, 1, 93);
      DeviceBuffer<std::uint16_t> d_A(x.gpu, A), d_B(x.gpu, B);
      DeviceBuffer<float> d_C(x.gpu, C);
      x.cpu.gemm_half(type, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), ldc);
      x.gpu.gemm_half(type, ta, tb, M, N, K, 0.5f, d_A.get(), lda, d_B.get(), ldb, 0.25f, d_C.get(), ldc);
      const std::string shape = std::string(trainer::kernels::dtype_name(type)) + (ta ? " A^T" : " A") +
                                (tb ? " B^T " : " B ") + dims({{"M", M}, {"N", N}, {"K", K}});
      x.report.close("gemm_half C", shape, C, d_C.read(), kHalfTol);
    }
  }
}

void matmul_half(Context& x) {
  for (auto [N, C, OC] : {std::array{231, 100, 300}, std::array{4096, 768, 3072}}) {
    const Dtype type = Dtype::bf16;
    const std::string shape = dims({{"N", N}, {"C", C}, {"OC", OC}}) + " bf16";
    const Halves inp = halves(std::size_t(N) * C, 1, 101, type), w = halves(std::size_t(OC) * C, 0.1f, 102, type);
    const Floats bias = random_floats(OC, 1, 103), dout = random_floats(std::size_t(N) * OC, 1, 104);
    Floats out(std::size_t(N) * OC), dinp(std::size_t(N) * C), dw = random_floats(w.size(), 1, 105),
        db = random_floats(OC, 1, 106);
    Halves dout_half(dout.size());
    DeviceBuffer<std::uint16_t> d_inp(x.gpu, inp), d_w(x.gpu, w), d_dout_half(x.gpu, dout.size());
    DeviceBuffer<float> d_bias(x.gpu, bias), d_dout(x.gpu, dout), d_out(x.gpu, out.size()),
        d_dinp(x.gpu, dinp.size()), d_dw(x.gpu, dw), d_db(x.gpu, db);
    x.cpu.matmul_forward_half(type, out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    x.gpu.matmul_forward_half(type, d_out.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC);
    x.report.close("matmul_forward_half out", shape, out, d_out.read(), kHalfTol);
    x.cpu.matmul_backward_half(type, dinp.data(), dw.data(), db.data(), dout.data(), dout_half.data(), inp.data(),
                               w.data(), N, C, OC);
    x.gpu.matmul_backward_half(type, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_dout_half.get(),
                               d_inp.get(), d_w.get(), N, C, OC);
    x.report.exact("matmul_backward_half dout_half", shape, dout_half, d_dout_half.read());
    x.report.close("matmul_backward_half dinp", shape, dinp, d_dinp.read(), kHalfTol);
    x.report.close("matmul_backward_half dweight (+=)", shape, dw, d_dw.read(), kHalfTol);
    x.report.close("matmul_backward_half dbias (+=)", shape, db, d_db.read(), kFp32Tol);
  }
}

void unscale(Context& x) {
  const std::size_t n = 1000003;
  for (bool plant : {false, true}) {
    Floats data = random_floats(n, 1000, 111);
    if (plant) data[n - 2] = INFINITY;  // near the end: the last block's last warp must see it
    DeviceBuffer<float> d_data(x.gpu, data);
    const std::string shape = dims({{"n", long(n)}}) + (plant ? " one inf" : " finite");
    const bool found = x.cpu.unscale_and_check(data.data(), n, 1.0f / 1024);
    x.report.flag("unscale_and_check found", shape, found, x.gpu.unscale_and_check(d_data.get(), n, 1.0f / 1024));
    x.report.exact("unscale_and_check data", shape, data, d_data.read());
  }
}

// A step's scalars kept on the device (backend.h), each against the CPU backend's host arithmetic, and the loader's
// asynchronous copy from page-locked memory with a fence polled until the device has passed it.
void step_scalars(Context& x) {
  const std::size_t n = 1000003;
  const Floats losses = random_floats(7, 4, 121);
  DeviceBuffer<float> d_losses(x.gpu, losses), d_out(x.gpu, 8);
  float mean = 0;
  x.cpu.mean_of(&mean, losses.data(), losses.size());
  x.gpu.mean_of(d_out.get(), d_losses.get(), losses.size());
  x.report.exact("mean_of", dims({{"n", 7}}), Floats{mean}, Floats{d_out.read()[0]});

  Floats grads = random_floats(n, 1, 122);
  DeviceBuffer<float> d_grads(x.gpu, grads);
  double sum_sq = 1.5;  // add_sum_squares adds to what is there
  DeviceBuffer<double> d_sum(x.gpu, std::vector<double>{1.5});
  x.cpu.add_sum_squares(&sum_sq, grads.data(), n);
  x.gpu.add_sum_squares(d_sum.get(), d_grads.get(), n);
  x.report.scalar("add_sum_squares", dims({{"n", long(n)}}), sum_sq, d_sum.read()[0], 1e-9);
  // From here on both start from the CPU's double, so every result must have the same bits.
  DeviceBuffer<double> d_value(x.gpu, std::vector<double>{sum_sq});
  float parts[2];
  x.cpu.split_double(parts, &sum_sq);
  x.gpu.split_double(d_out.get(), d_value.get());
  const Floats d_parts = d_out.read();
  x.report.exact("split_double", "one double", Floats{parts[0], parts[1]}, Floats{d_parts[0], d_parts[1]});
  const Floats many = random_floats(9, 1e3f, 123);
  DeviceBuffer<float> d_many(x.gpu, many);
  double total = 0;
  x.cpu.sum_parts(&total, many.data(), many.size());
  x.gpu.sum_parts(d_value.get(), d_many.get(), many.size());
  x.report.scalar("sum_parts", dims({{"n", 9}}), total, d_value.read()[0], 0);
  float norm = 0;
  DeviceBuffer<double> d_norm_sq(x.gpu, std::vector<double>{sum_sq});
  x.cpu.norm_of(&norm, &sum_sq);
  x.gpu.norm_of(d_out.get(), d_norm_sq.get());
  x.report.exact("norm_of", "one double", Floats{norm}, Floats{d_out.read()[0]});
  for (float max_norm : {1.0f, 1e6f}) {  // clipped, and left as it is
    x.cpu.clip_to(grads.data(), n, &norm, max_norm);
    x.gpu.clip_to(d_grads.get(), n, d_out.get(), max_norm);
    x.report.exact("clip_to", dims({{"n", long(n)}, {"max_norm", long(max_norm)}}), grads, d_grads.read());
  }

  const std::vector<std::int32_t> tokens = random_tokens(4097, 50257, 124);
  auto* pinned = static_cast<std::int32_t*>(x.gpu.allocate_host(tokens.size() * sizeof(std::int32_t)));
  std::memcpy(pinned, tokens.data(), tokens.size() * sizeof(std::int32_t));
  DeviceBuffer<std::int32_t> d_tokens(x.gpu, tokens.size());
  x.gpu.copy_in_async(d_tokens.get(), pinned, tokens.size() * sizeof(std::int32_t));
  const std::uint64_t fence = x.gpu.record_fence();
  long polls = 1;
  while (!x.gpu.fence_done(fence)) ++polls;
  const std::vector<std::int32_t> copied = d_tokens.read();
  x.gpu.release_host(pinned);
  x.report.flag("copy_in_async + fence (" + std::to_string(polls) + " polls)", dims({{"n", 4097}}), true,
                copied == tokens);
}

}  // namespace

std::vector<Case> precision_cases() {
  return {{"adamw", adamw},         {"sum_squares/scale", reductions}, {"to_half/from_half", conversions},
          {"gemm_half", gemm_half}, {"matmul_half", matmul_half},      {"unscale_and_check", unscale},
          {"step scalars", step_scalars}};
}

std::vector<Case> all_cases() {
  std::vector<Case> cases = layer_cases();
  for (const Case& c : precision_cases()) cases.push_back(c);
  return cases;
}

std::string dims(std::initializer_list<std::pair<const char*, long>> values) {
  std::string out;
  for (const auto& [name, value] : values) out += (out.empty() ? "" : " ") + std::string(name) + "=" + std::to_string(value);
  return out;
}

}  // namespace dtrain::gpu_check
