#pragma once

// The two sides of a kernel check: the same values in host memory (for the CPU backend, the reference) and in
// device memory (for the CUDA backend), and the comparison of what each computed.
//
// The norm: for a reference r and a result g of n values,
//   rel_l2  = ||g - r||_2 / ||r||_2        (the whole tensor's error; 0 when both are 0)
//   rel_max = max_i |g_i - r_i| / max_i |r_i|
// A check passes when rel_l2 <= tol and rel_max <= 10 tol: rel_l2 is the parity figure the issue asks for
// (1e-4 for fp32), rel_max catches an error confined to a few elements (one wrong tile) that the L2 norm of a
// large tensor dilutes, with 10x room for single elements that cancel to near zero (whose absolute error scales
// with the terms summed, not with the result). Exact checks (16-bit conversions, scaling) compare bits.

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/backend.h"

namespace dtrain::gpu_check {

using trainer::kernels::CudaBackend;

// Device memory of n values of T, freed on destruction.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(CudaBackend& gpu, std::size_t n)
      : gpu_(gpu), n_(n), data_(static_cast<T*>(gpu.allocate_bytes(n * sizeof(T)))) {}
  DeviceBuffer(CudaBackend& gpu, const std::vector<T>& values) : DeviceBuffer(gpu, values.size()) {
    gpu_.copy_to_device(data_, values.data(), values.size() * sizeof(T));
  }
  ~DeviceBuffer() { gpu_.release_bytes(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  std::vector<T> read() const {
    std::vector<T> out(n_);
    gpu_.copy_to_host(out.data(), data_, n_ * sizeof(T));
    return out;
  }

 private:
  CudaBackend& gpu_;
  std::size_t n_;
  T* data_;
};

// The CUDA backend of GPU 0 for a check tool; nullptr after printing why not, with *exit_code set to 77 when no GPU
// is visible ("SKIPPED: no CUDA GPU visible", ctest's skip) and to 1 when one is but the backend did not start.
CudaBackend* start_cuda(int* exit_code);

// Uniform values in [-scale, scale) from a fixed seed, so a failure reproduces.
std::vector<float> random_floats(std::size_t n, float scale, std::uint32_t seed);
// Token ids in [0, vocab).
std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::uint32_t seed);

struct Error {
  double rel_l2 = 0;
  double rel_max = 0;
  double max_ref = 0;
};
Error compare(const std::vector<float>& reference, const std::vector<float>& result);

// Counts the checks and prints one line per check: "PASS|FAIL  what  shape  figures".
class Report {
 public:
  // The tolerance comparison above; returns whether it passed.
  bool close(const std::string& what, const std::string& shape, const std::vector<float>& reference,
             const std::vector<float>& result, double tol);
  // Equal bits (16-bit values or fp32 words).
  bool exact(const std::string& what, const std::string& shape, const std::vector<std::uint16_t>& reference,
             const std::vector<std::uint16_t>& result);
  bool exact(const std::string& what, const std::string& shape, const std::vector<float>& reference,
             const std::vector<float>& result);
  // A scalar within a relative tolerance (a loss, a sum of squares) or a flag.
  bool scalar(const std::string& what, const std::string& shape, double reference, double result, double tol);
  bool flag(const std::string& what, const std::string& shape, bool reference, bool result);
  // A case that threw (a CUDA error): printed as a failure with the message.
  void error(const std::string& what, const std::string& message);

  int passed() const { return passed_; }
  int failed() const { return failed_; }

 private:
  bool line(bool pass, const std::string& what, const std::string& shape, const std::string& figures);
  int passed_ = 0;
  int failed_ = 0;
};

}  // namespace dtrain::gpu_check
