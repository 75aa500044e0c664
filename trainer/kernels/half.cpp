#include "trainer/kernels/half.h"

#include <stdexcept>

// Compiled for x86-64-v3 (AVX2) and baseline x86-64, the loader picking what the CPU has, as cpu/vector_ops.cpp.
#define DTRAIN_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))

namespace dtrain::trainer::kernels {
namespace {

void require_half(Dtype type, const char* where) {
  if (type == Dtype::fp32) {
    throw std::invalid_argument(std::string(where) + " was asked for fp32; it converts to and from bf16 or fp16 "
                                "only (an fp32 buffer needs no conversion)");
  }
}

// One loop per type, so that the conversion inlines into a loop without a branch on the type.
template <std::uint16_t (*Round)(float)>
DTRAIN_MULTIVERSION void round_span(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = Round(in[i]);
}

template <float (*Widen)(std::uint16_t)>
DTRAIN_MULTIVERSION void widen_span(float* out, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = Widen(in[i]);
}

template <std::uint16_t (*Round)(float), float (*Widen)(std::uint16_t)>
DTRAIN_MULTIVERSION void round_divide_span(std::uint16_t* out, const float* in, std::size_t n, float divisor) {
  for (std::size_t i = 0; i < n; ++i) out[i] = Round(Widen(Round(in[i])) / divisor);
}

template <std::uint16_t (*Round)(float), float (*Widen)(std::uint16_t)>
DTRAIN_MULTIVERSION void add_span(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = Round(Widen(a[i]) + Widen(b[i]));
}

}  // namespace

const char* dtype_name(Dtype type) {
  switch (type) {
    case Dtype::fp32: return "fp32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
  }
  return "unknown";
}

std::size_t dtype_bytes(Dtype type) { return type == Dtype::fp32 ? 4 : 2; }

Result<Dtype> parse_dtype(const std::string& name, const std::string& what) {
  for (Dtype type : {Dtype::fp32, Dtype::bf16, Dtype::fp16}) {
    if (name == dtype_name(type)) return {{}, type};
  }
  return {Status(StatusCode::invalid_argument,
                 what + " '" + name + "' is not a floating-point type; use fp32, bf16 or fp16")};
}

void to_half(std::uint16_t* out, const float* in, std::size_t n, Dtype type) {
  require_half(type, "to_half");
  if (type == Dtype::bf16) {
    round_span<bf16_from_float>(out, in, n);
  } else {
    round_span<fp16_from_float>(out, in, n);
  }
}

void from_half(float* out, const std::uint16_t* in, std::size_t n, Dtype type) {
  require_half(type, "from_half");
  if (type == Dtype::bf16) {
    widen_span<float_from_bf16>(out, in, n);
  } else {
    widen_span<float_from_fp16>(out, in, n);
  }
}

void to_half_divided(std::uint16_t* out, const float* in, std::size_t n, float divisor, Dtype type) {
  require_half(type, "to_half_divided");
  if (type == Dtype::bf16) {
    round_divide_span<bf16_from_float, float_from_bf16>(out, in, n, divisor);
  } else {
    round_divide_span<fp16_from_float, float_from_fp16>(out, in, n, divisor);
  }
}

void add_half(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n, Dtype type) {
  require_half(type, "add_half");
  if (type == Dtype::bf16) {
    add_span<bf16_from_float, float_from_bf16>(out, a, b, n);
  } else {
    add_span<fp16_from_float, float_from_fp16>(out, a, b, n);
  }
}

}  // namespace dtrain::trainer::kernels
