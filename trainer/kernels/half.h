#pragma once

// The 16-bit floating-point formats of mixed precision and the one definition of how fp32 turns into them and back.
// Every part that stores or sends 16 bits (the backend's copies and matrix products, DDP's compressed gradients,
// the communicators' 16-bit collectives) converts through these, so a value rounds the same way everywhere.
//
//   bf16  (bfloat16): fp32's sign and 8-bit exponent, 7 mantissa bits: fp32's range, about 3 significant digits.
//         From fp32: round to nearest, ties to even; a NaN becomes 0x7FC0 (a quiet NaN) whatever its sign or
//         payload; infinities and overflow past bf16's largest finite value give inf. As PyTorch's scalar
//         c10::BFloat16 (round_to_nearest_even), bit for bit (PyTorch's vectorised CPU cast differs only in
//         writing a NaN as 0xFFFF).
//   fp16  (IEEE 754 binary16): 5-bit exponent, 10 mantissa bits: largest finite 65504, subnormals down to 2^-24.
//         From fp32: round to nearest, ties to even, overflow to inf, gradual underflow to subnormals and zero,
//         NaN to sign | 0x7E00. As PyTorch's c10::Half (fp16_ieee_from_fp32_value), bit for bit.
// Both directions back to fp32 are exact.
//
// The scalar functions are written without branches (selects only) so that the loops over them in half.cpp
// vectorise; they assume the default floating-point environment (round to nearest, no flush-to-zero).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace dtrain::trainer::kernels {

// The element type of a buffer or of a collective's payload.
enum class Dtype {
  fp32,  // IEEE binary32: master weights, optimizer state, and every reduction's accumulator
  bf16,  // see above
  fp16,  // see above
};

// "fp32", "bf16", "fp16".
const char* dtype_name(Dtype type);
// Bytes per element: 4 or 2.
std::size_t dtype_bytes(Dtype type);
// The type named by `name` ("fp32", "bf16", "fp16"); invalid_argument naming `what` (the flag or field it came
// from) and the accepted names otherwise.
Result<Dtype> parse_dtype(const std::string& name, const std::string& what);

inline std::uint16_t bf16_from_float(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(nan ? 0x7FC0u : rounded);
}

inline float float_from_bf16(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

// Rounding is done by the FPU: |value| is scaled so that fp16's last mantissa bit lands on fp32's last one and a
// power of two is added that pushes the bits below it out, rounding to nearest even as the addition does; the
// exponent and mantissa are then read off the sum. Subnormals fall out of the same addition (the added power is
// clamped at fp16's smallest normal exponent).
inline std::uint16_t fp16_from_float(float value) {
  constexpr float kScaleToInf = 0x1.0p+112f;
  constexpr float kScaleToZero = 0x1.0p-110f;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t doubled = bits + bits;  // the sign shifted out
  const std::uint32_t sign = bits & 0x80000000u;
  std::uint32_t bias = doubled & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  float magnitude = std::bit_cast<float>(bits & 0x7FFFFFFFu) * kScaleToInf * kScaleToZero;
  magnitude = std::bit_cast<float>((bias >> 1) + 0x07800000u) + magnitude;
  const std::uint32_t sum = std::bit_cast<std::uint32_t>(magnitude);
  const std::uint32_t nonsign = ((sum >> 13) & 0x00007C00u) + (sum & 0x00000FFFu);
  return static_cast<std::uint16_t>((sign >> 16) | (doubled > 0xFF000000u ? 0x7E00u : nonsign));
}

// Normal values move their exponent and mantissa into fp32's fields and rescale by 2^-112; subnormals are read
// as the mantissa placed under an exponent of 2^-1 minus 0.5, which the FPU does exactly.
inline float float_from_fp16(std::uint16_t value) {
  const std::uint32_t word = static_cast<std::uint32_t>(value) << 16;
  const std::uint32_t sign = word & 0x80000000u;
  const std::uint32_t doubled = word + word;
  const float normal = std::bit_cast<float>((doubled >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float subnormal = std::bit_cast<float>((doubled >> 17) | (126u << 23)) - 0.5f;
  const std::uint32_t magnitude =
      doubled < (1u << 27) ? std::bit_cast<std::uint32_t>(subnormal) : std::bit_cast<std::uint32_t>(normal);
  return std::bit_cast<float>(sign | magnitude);
}

// One value of `type` (bf16 or fp16) from fp32 and back.
inline std::uint16_t half_from_float(float value, Dtype type) {
  return type == Dtype::bf16 ? bf16_from_float(value) : fp16_from_float(value);
}
inline float float_from_half(std::uint16_t value, Dtype type) {
  return type == Dtype::bf16 ? float_from_bf16(value) : float_from_fp16(value);
}

// Spans, vectorised (see half.cpp). `type` is bf16 or fp16; fp32 is a programming error (std::invalid_argument).
// out[i] = in[i] rounded to `type`.
void to_half(std::uint16_t* out, const float* in, std::size_t n, Dtype type);
// out[i] = in[i] as fp32 (exact).
void from_half(float* out, const std::uint16_t* in, std::size_t n, Dtype type);
// out[i] = round(float(round(in[i])) / divisor): the cast to 16 bits followed by a 16-bit division, which is what
// PyTorch's fp16/bf16 DDP compression hooks do to a bucket before its allreduce (`bucket.to(dtype).div_(world)`).
void to_half_divided(std::uint16_t* out, const float* in, std::size_t n, float divisor, Dtype type);
// out[i] = round(float(a[i]) + float(b[i])): one pairwise step of a 16-bit sum, accumulated in fp32 and rounded
// back, as Gloo's and NCCL's 16-bit reductions do. out may alias a or b.
void add_half(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n, Dtype type);

}  // namespace dtrain::trainer::kernels
