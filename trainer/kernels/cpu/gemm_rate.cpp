#include "trainer/kernels/cpu/gemm_rate.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "trainer/kernels/cpu/backend.h"

namespace dtrain::trainer::kernels {

GemmRate measure_gemm_rate(int threads, int size, std::chrono::milliseconds budget) {
  using Clock = std::chrono::steady_clock;
  set_cpu_threads(threads);
  Backend& backend = cpu_backend();
  const std::size_t n = static_cast<std::size_t>(size) * static_cast<std::size_t>(size);
  // Values that stay finite and are not denormal: the rate of ordinary arithmetic.
  std::vector<float> inp(n), weight(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    inp[i] = static_cast<float>(i % 7) * 0.125f + 0.5f;
    weight[i] = static_cast<float>(i % 5) * 0.0625f - 0.125f;
  }
  const auto product = [&] { backend.matmul_forward(out.data(), inp.data(), weight.data(), nullptr, size, size, size); };
  product();   // warm-up: OpenMP's threads start, pages are touched
  const double flops = 2.0 * static_cast<double>(size) * size * size;
  GemmRate rate{0, cpu_threads(), size, 0};
  const auto end = Clock::now() + budget;
  while (rate.repeats < kMinRepeats || Clock::now() < end) {
    const auto start = Clock::now();
    product();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (seconds > 0) rate.flops_per_s = std::max(rate.flops_per_s, flops / seconds);
    ++rate.repeats;
  }
  return rate;
}

}  // namespace dtrain::trainer::kernels
