#include "tests/gpu/check_buffers.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>

#include "trainer/kernels/cuda/factory.h"

namespace dtrain::gpu_check {

CudaBackend* start_cuda(int* exit_code) {
  try {
    return &dynamic_cast<CudaBackend&>(trainer::kernels::make_backend("cuda", 0));
  } catch (const trainer::kernels::BackendUnavailable& e) {
    std::printf("SKIPPED: no CUDA GPU visible\n  %s\n", e.what());
    *exit_code = 77;
  } catch (const std::exception& e) {  // a GPU is there but the backend did not start (cuBLASLt missing, ...)
    std::printf("FAIL  the CUDA backend did not start: %s\n", e.what());
    *exit_code = 1;
  }
  return nullptr;
}

std::vector<float> random_floats(std::size_t n, float scale, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, vocab - 1);
  std::vector<std::int32_t> out(n);
  for (std::int32_t& x : out) x = dist(rng);
  return out;
}

Error compare(const std::vector<float>& reference, const std::vector<float>& result) {
  double diff2 = 0, ref2 = 0, max_diff = 0, max_ref = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double d = static_cast<double>(result[i]) - reference[i];
    diff2 += d * d;
    ref2 += static_cast<double>(reference[i]) * reference[i];
    // A NaN anywhere must fail: comparisons with NaN are false, so it is caught explicitly.
    max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, std::abs(d));
    max_ref = std::max(max_ref, static_cast<double>(std::abs(reference[i])));
  }
  Error e;
  e.max_ref = max_ref;
  e.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  e.rel_max = max_ref > 0 ? max_diff / max_ref : max_diff;
  if (std::isnan(diff2)) e.rel_l2 = INFINITY;
  return e;
}

bool Report::line(bool pass, const std::string& what, const std::string& shape, const std::string& figures) {
  std::printf("%-4s  %-40s %-28s %s\n", pass ? "PASS" : "FAIL", what.c_str(), shape.c_str(), figures.c_str());
  std::fflush(stdout);
  (pass ? passed_ : failed_) += 1;
  return pass;
}

bool Report::close(const std::string& what, const std::string& shape, const std::vector<float>& reference,
                   const std::vector<float>& result, double tol) {
  const Error e = compare(reference, result);
  char figures[160];
  std::snprintf(figures, sizeof(figures), "rel_l2 %.2e  rel_max %.2e  max|ref| %.2e  tol %.0e", e.rel_l2, e.rel_max,
                e.max_ref, tol);
  return line(e.rel_l2 <= tol && e.rel_max <= 10 * tol, what, shape, figures);
}

template <typename T>
bool exact_bits(Report& report, const std::string& what, const std::string& shape, const std::vector<T>& reference,
                const std::vector<T>& result, bool (Report::*line)(bool, const std::string&, const std::string&,
                                                                  const std::string&)) {
  std::size_t mismatches = 0, first = reference.size();
  for (std::size_t i = 0; i < reference.size(); ++i) {
    if (std::memcmp(&reference[i], &result[i], sizeof(T)) != 0 && mismatches++ == 0) first = i;
  }
  std::string figures = std::to_string(mismatches) + " of " + std::to_string(reference.size()) + " differ";
  if (mismatches > 0) figures += " (first at " + std::to_string(first) + ")";
  return (report.*line)(mismatches == 0, what, shape, figures + "  (bit-exact)");
}

bool Report::exact(const std::string& what, const std::string& shape, const std::vector<std::uint16_t>& reference,
                   const std::vector<std::uint16_t>& result) {
  return exact_bits(*this, what, shape, reference, result, &Report::line);
}

bool Report::exact(const std::string& what, const std::string& shape, const std::vector<float>& reference,
                   const std::vector<float>& result) {
  return exact_bits(*this, what, shape, reference, result, &Report::line);
}

bool Report::scalar(const std::string& what, const std::string& shape, double reference, double result, double tol) {
  const double rel = std::abs(result - reference) / std::max(std::abs(reference), 1e-30);
  char figures[160];
  std::snprintf(figures, sizeof(figures), "cpu %.9g  cuda %.9g  rel %.2e  tol %.0e", reference, result, rel, tol);
  return line(rel <= tol, what, shape, figures);
}

bool Report::flag(const std::string& what, const std::string& shape, bool reference, bool result) {
  return line(reference == result, what, shape,
              std::string("cpu ") + (reference ? "true" : "false") + "  cuda " + (result ? "true" : "false"));
}

void Report::error(const std::string& what, const std::string& message) { line(false, what, "", message); }

}  // namespace dtrain::gpu_check
