// The CPU backend's ops: each backward against central finite differences of its forward on tiny sizes, and the
// forwards against direct formulas.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "trainer/kernels/cpu/backend.h"

using dtrain::trainer::kernels::Backend;
using dtrain::trainer::kernels::cpu_backend;

namespace {

std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Compares analytic[i] with the central difference of objective() in x[i], for every element of x. The error is
// relative to the largest analytic gradient of the tensor (fp32 forward, so differences are good to ~1e-3).
void check_gradient(const char* what, std::vector<float>& x, const std::vector<float>& analytic,
                    const std::function<double()>& objective, float h = 1e-2f, double tol = 1e-2) {
  REQUIRE(x.size() == analytic.size());
  double max_abs = 1e-6;
  for (float g : analytic) max_abs = std::max(max_abs, std::abs(static_cast<double>(g)));
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double plus = objective();
    x[i] = saved - h;
    const double minus = objective();
    x[i] = saved;
    const double numeric = (plus - minus) / (2.0 * h);
    worst = std::max(worst, std::abs(numeric - analytic[i]) / max_abs);
  }
  INFO(what << ": worst error relative to max |grad| " << max_abs << " is " << worst);
  CHECK(worst < tol);
}

}  // namespace

TEST_CASE("matmul backward matches finite differences; dweight and dbias accumulate") {
  Backend& k = cpu_backend();
  const int N = 5, C = 4, OC = 3;
  auto inp = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3);
  const auto R = random_vector(N * OC, 4);
  std::vector<float> out(N * OC);
  auto objective = [&] {
    k.matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(out, R);
  };
  objective();
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double expected = b[o];
      for (int c = 0; c < C; ++c) expected += static_cast<double>(inp[n * C + c]) * w[o * C + c];
      CHECK(out[n * OC + o] == doctest::Approx(expected).epsilon(1e-5));
    }
  std::vector<float> dinp(N * C, 123.0f), dw(OC * C, 0.0f), db(OC, 0.0f);
  k.matmul_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC);
  check_gradient("dinp", inp, dinp, objective);
  check_gradient("dweight", w, dw, objective);
  check_gradient("dbias", b, db, objective);

  // A second backward adds the same amount again.
  std::vector<float> dw2 = dw, db2 = db;
  k.matmul_backward(dinp.data(), dw2.data(), db2.data(), R.data(), inp.data(), w.data(), N, C, OC);
  for (std::size_t i = 0; i < dw.size(); ++i) CHECK(dw2[i] == doctest::Approx(2 * dw[i]));
  for (std::size_t i = 0; i < db.size(); ++i) CHECK(db2[i] == doctest::Approx(2 * db[i]));
}

TEST_CASE("layernorm forward normalises rows; backward matches finite differences") {
  Backend& k = cpu_backend();
  const int N = 3, C = 8;
  auto inp = random_vector(N * C, 5, 2.0f), w = random_vector(C, 6), b = random_vector(C, 7);
  const auto R = random_vector(N * C, 8);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto objective = [&] {
    k.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(out, R);
  };
  objective();
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += inp[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (inp[n * C + c] - m) * (inp[n * C + c] - m);
    v /= C;
    for (int c = 0; c < C; ++c)
      CHECK(out[n * C + c] == doctest::Approx((inp[n * C + c] - m) / std::sqrt(v + 1e-5) * w[c] + b[c]).epsilon(1e-4));
  }
  // dinp accumulates: start from a known value and subtract it.
  std::vector<float> dinp(N * C, 0.5f), dw(C, 0.0f), db(C, 0.0f);
  k.layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), mean.data(), rstd.data(),
                       N, C);
  for (float& d : dinp) d -= 0.5f;
  check_gradient("dinp", inp, dinp, objective, 1e-2f);
  check_gradient("dweight", w, dw, objective);
  check_gradient("dbias", b, db, objective);
}

TEST_CASE("causal attention: forward masks the future, backward matches finite differences") {
  Backend& k = cpu_backend();
  const int B = 2, T = 5, C = 8, NH = 2;
  auto qkv = random_vector(B * T * 3 * C, 9);
  const auto R = random_vector(B * T * C, 10);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  auto objective = [&] {
    k.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, R);
  };
  objective();
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < T; ++t) {
      double sum = 0;
      for (int s = 0; s < T; ++s) {
        const float a = att[(bh * T + t) * T + s];
        if (s > t) CHECK(a == 0.0f);
        sum += a;
      }
      CHECK(sum == doctest::Approx(1.0));
    }
  // Changing a future key or value does not change an earlier output.
  std::vector<float> before = out;
  qkv[(0 * T + 4) * 3 * C + C + 1] += 1.0f;      // key of position 4, batch 0
  qkv[(0 * T + 4) * 3 * C + 2 * C + 1] += 1.0f;  // value of position 4, batch 0
  objective();
  for (int t = 0; t < 4; ++t)
    for (int c = 0; c < C; ++c) CHECK(out[t * C + c] == before[t * C + c]);

  std::vector<float> dqkv(qkv.size(), 7.0f), scratch(k.attention_scratch_size(B, T, C, NH));
  objective();
  k.attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
  check_gradient("dqkv", qkv, dqkv, objective);
}

TEST_CASE("gelu (tanh approximation) and its backward") {
  Backend& k = cpu_backend();
  auto x = random_vector(257, 11, 3.0f);
  x[0] = 0.0f;
  x[1] = -20.0f;
  x[2] = 20.0f;
  const auto R = random_vector(x.size(), 12);
  std::vector<float> out(x.size());
  auto objective = [&] {
    k.gelu_forward(out.data(), x.data(), x.size());
    return dot(out, R);
  };
  objective();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double expected = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    CHECK(out[i] == doctest::Approx(expected).epsilon(1e-5).scale(1.0));
  }
  std::vector<float> dx(x.size());
  k.gelu_backward(dx.data(), x.data(), R.data(), x.size());
  check_gradient("dinp", x, dx, objective, 1e-3f);
}

TEST_CASE("softmax cross-entropy over the first V of Vp columns") {
  Backend& k = cpu_backend();
  const int N = 4, V = 6, Vp = 8;
  auto logits = random_vector(N * Vp, 13, 2.0f);
  const std::vector<std::int32_t> targets{0, 5, 2, 3};
  std::vector<float> probs(N * Vp), losses(N);
  auto objective = [&] {
    return static_cast<double>(
        k.softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V, Vp));
  };
  const double mean = objective();
  double expected_mean = 0;
  for (int n = 0; n < N; ++n) {
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(static_cast<double>(logits[n * Vp + i]));
    const double loss = std::log(z) - logits[n * Vp + targets[n]];
    CHECK(losses[n] == doctest::Approx(loss).epsilon(1e-5));
    expected_mean += loss / N;
    for (int i = V; i < Vp; ++i) CHECK(probs[n * Vp + i] == 0.0f);
  }
  CHECK(mean == doctest::Approx(expected_mean).epsilon(1e-5));
  std::vector<float> dlogits(N * Vp, 9.0f);
  k.softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, V, Vp);
  for (int n = 0; n < N; ++n)
    for (int i = V; i < Vp; ++i) CHECK(dlogits[n * Vp + i] == 0.0f);
  check_gradient("dlogits", logits, dlogits, objective, 1e-2f);
}

TEST_CASE("embedding: forward adds token and position rows; backward scatters, repeated tokens add up") {
  Backend& k = cpu_backend();
  const int B = 2, T = 3, C = 4, V = 5;
  const auto wte = random_vector(V * C, 14), wpe = random_vector(T * C, 15);
  const std::vector<std::int32_t> tokens{1, 4, 1, 0, 1, 3};
  std::vector<float> out(B * T * C);
  k.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  for (int n = 0; n < B * T; ++n)
    for (int c = 0; c < C; ++c) CHECK(out[n * C + c] == wte[tokens[n] * C + c] + wpe[(n % T) * C + c]);
  const auto dout = random_vector(B * T * C, 16);
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  k.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  for (int c = 0; c < C; ++c) {
    CHECK(dwte[1 * C + c] == doctest::Approx(dout[0 * C + c] + dout[2 * C + c] + dout[4 * C + c]));
    CHECK(dwte[2 * C + c] == 0.0f);
    CHECK(dwpe[1 * C + c] == doctest::Approx(dout[1 * C + c] + dout[4 * C + c]));
  }
}

TEST_CASE("adamw_update follows torch.optim.AdamW's formula") {
  Backend& k = cpu_backend();
  std::vector<float> p{1.0f, -2.0f, 0.5f}, g{0.1f, -0.3f, 0.0f}, m{0.01f, 0.0f, -0.02f}, v{1e-4f, 0.0f, 4e-4f};
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const long t = 3;
  std::vector<double> expected(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double mi = b1 * m[i] + (1 - b1) * g[i], vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    expected[i] = p[i] * (1 - lr * wd) - (lr / bc1) * mi / (std::sqrt(vi) / std::sqrt(bc2) + eps);
  }
  k.adamw_update(p.data(), g.data(), m.data(), v.data(), p.size(), lr, b1, b2, eps, wd, t);
  for (std::size_t i = 0; i < p.size(); ++i) CHECK(p[i] == doctest::Approx(expected[i]).epsilon(1e-6));
}

TEST_CASE("large elementwise ops split over threads give the same result as one pass") {
  Backend& k = cpu_backend();
  const std::size_t n = 100'003;  // not a multiple of the span size
  const auto a = random_vector(n, 17), b = random_vector(n, 18);
  std::vector<float> out(n);
  k.residual_forward(out.data(), a.data(), b.data(), n);
  double squares = 0;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mismatches += out[i] != a[i] + b[i];
    squares += static_cast<double>(a[i]) * a[i];
  }
  CHECK(mismatches == 0);
  CHECK(k.sum_squares(a.data(), n) == doctest::Approx(squares).epsilon(1e-12));
}

TEST_CASE("matmul split over threads equals the direct product (forward, dinp, dweight, dbias)") {
  Backend& k = cpu_backend();
  const int N = 130, C = 70, OC = 90;  // large enough to be split, sizes that do not divide evenly
  const auto inp = random_vector(N * C, 19), w = random_vector(OC * C, 20), b = random_vector(OC, 21);
  const auto dout = random_vector(N * OC, 22);
  std::vector<float> out(N * OC), dinp(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
  k.matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  k.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  std::size_t wrong = 0;
  auto near = [&](float got, double want) { wrong += std::abs(got - want) > 1e-4 * (1.0 + std::abs(want)); };
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b[o];
      for (int c = 0; c < C; ++c) s += static_cast<double>(inp[n * C + c]) * w[o * C + c];
      near(out[n * OC + o], s);
    }
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int o = 0; o < OC; ++o) s += static_cast<double>(dout[n * OC + o]) * w[o * C + c];
      near(dinp[n * C + c], s);
    }
  for (int o = 0; o < OC; ++o) {
    double sb = 0;
    for (int n = 0; n < N; ++n) sb += dout[n * OC + o];
    near(db[o], sb);
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int n = 0; n < N; ++n) s += static_cast<double>(dout[n * OC + o]) * inp[n * C + c];
      near(dw[o * C + c], s);
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("attention over several row blocks (T = 150) matches a direct computation") {
  Backend& k = cpu_backend();
  const int B = 1, T = 150, C = 8, NH = 2, hs = C / NH;
  auto qkv = random_vector(B * T * 3 * C, 23);
  const auto R = random_vector(B * T * C, 24);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  auto objective = [&] {
    k.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, R);
  };
  objective();
  std::size_t wrong = 0;
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) {
      std::vector<double> w(t + 1);
      double mx = -1e300, z = 0;
      for (int s = 0; s <= t; ++s) {
        double d = 0;
        for (int i = 0; i < hs; ++i) d += double(qkv[t * 3 * C + h * hs + i]) * qkv[s * 3 * C + C + h * hs + i];
        w[s] = d / std::sqrt(double(hs));
        mx = std::max(mx, w[s]);
      }
      for (double& x : w) z += (x = std::exp(x - mx));
      for (int i = 0; i < hs; ++i) {
        double o = 0;
        for (int s = 0; s <= t; ++s) o += w[s] / z * qkv[s * 3 * C + 2 * C + h * hs + i];
        wrong += std::abs(out[t * C + h * hs + i] - o) > 1e-5 * (1 + std::abs(o));
      }
    }
  CHECK(wrong == 0);

  std::vector<float> dqkv(qkv.size()), scratch(k.attention_scratch_size(B, T, C, NH));
  k.attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
  // Finite differences on every 5th element (all three of q, k, v, early and late positions).
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < qkv.size(); i += 5) index.push_back(i);
  double max_abs = 1e-6, worst = 0;
  for (float g : dqkv) max_abs = std::max(max_abs, std::abs(double(g)));
  for (std::size_t i : index) {
    const float saved = qkv[i];
    qkv[i] = saved + 1e-2f;
    const double plus = objective();
    qkv[i] = saved - 1e-2f;
    const double minus = objective();
    qkv[i] = saved;
    worst = std::max(worst, std::abs((plus - minus) / 2e-2 - dqkv[i]) / max_abs);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-2);
}

TEST_CASE("layernorm and embedding on many rows (threaded) equal the same ops row by row") {
  Backend& k = cpu_backend();
  const int N = 600, C = 64, T = 600, V = 7;
  const auto inp = random_vector(N * C, 25), w = random_vector(C, 26), b = random_vector(C, 27);
  const auto dout = random_vector(N * C, 28);
  std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  k.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  k.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                       rstd.data(), N, C);
  std::vector<float> row_out(C), row_dinp(C), row_dw(C, 0.0f), row_db(C, 0.0f);
  std::size_t wrong = 0;
  for (int n = 0; n < N; ++n) {
    float m = 0, r = 0;
    k.layernorm_forward(row_out.data(), &m, &r, inp.data() + n * C, w.data(), b.data(), 1, C);
    std::fill(row_dinp.begin(), row_dinp.end(), 0.0f);
    k.layernorm_backward(row_dinp.data(), row_dw.data(), row_db.data(), dout.data() + n * C, inp.data() + n * C,
                         w.data(), &m, &r, 1, C);
    for (int c = 0; c < C; ++c) {
      wrong += row_out[c] != out[n * C + c];
      wrong += row_dinp[c] != dinp[n * C + c];
    }
  }
  CHECK(wrong == 0);
  for (int c = 0; c < C; ++c) {
    CHECK(dw[c] == doctest::Approx(row_dw[c]).epsilon(1e-4));
    CHECK(db[c] == doctest::Approx(row_db[c]).epsilon(1e-4));
  }

  std::vector<std::int32_t> tokens(T);
  for (int t = 0; t < T; ++t) tokens[t] = (t * 5) % V;
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f), expect_wte(V * C, 0.0f);
  k.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), 1, T, C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) expect_wte[tokens[t] * C + c] += dout[t * C + c];
  wrong = 0;
  for (int i = 0; i < V * C; ++i) wrong += std::abs(dwte[i] - expect_wte[i]) > 1e-5f;
  for (int i = 0; i < T * C; ++i) wrong += dwpe[i] != dout[i];
  CHECK(wrong == 0);
}
