// fp32 <-> bf16 / fp16: exact bit patterns at the edges (ties, overflow, subnormals, NaN), every 16-bit value
// through a round trip, the vectorised spans against the scalar definition, and digests of PyTorch's own casts.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/half.h"

using namespace dtrain::trainer::kernels;

namespace {

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

// The patterns the PyTorch digests below were computed over; the same generator (splitmix64, seed 2024) in Python:
//   odd i: the exponent forced into [2^-27, 2^18] (fp16's normals, subnormals and overflow);
//   i % 8 == 3: the low 16 bits set to 0x8000, an exact tie for bf16's rounding.
std::vector<std::uint32_t> patterns(std::size_t n) {
  std::vector<std::uint32_t> out;
  std::uint64_t state = 2024;
  for (std::size_t i = 0; i < n; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    const std::uint64_t x = z ^ (z >> 31);
    auto bits = static_cast<std::uint32_t>(x);
    if (i % 2 == 1) bits = (bits & 0x807FFFFFu) | static_cast<std::uint32_t>((100 + (x >> 32) % 46) << 23);
    if (i % 8 == 3) bits = (bits & 0xFFFF0000u) | 0x8000u;
    out.push_back(bits);
  }
  return out;
}

// FNV-1a over the little-endian bytes of each value.
template <typename T>
std::uint64_t fnv1a(const std::vector<T>& values) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (T value : values) {
    for (std::size_t k = 0; k < sizeof(T); ++k) {
      hash = (hash ^ ((static_cast<std::uint64_t>(value) >> (8 * k)) & 0xFF)) * 0x100000001b3ull;
    }
  }
  return hash;
}

std::vector<float> as_floats(const std::vector<std::uint32_t>& bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = from_bits(bits[i]);
  return out;
}

}  // namespace

TEST_CASE("bf16 from fp32: round to nearest even, overflow to inf, NaN to 0x7FC0") {
  CHECK(bf16_from_float(1.0f) == 0x3F80);
  CHECK(bf16_from_float(from_bits(0x3F808000)) == 0x3F80);  // tie, even below: down
  CHECK(bf16_from_float(from_bits(0x3F818000)) == 0x3F82);  // tie, odd below: up
  CHECK(bf16_from_float(from_bits(0x3F808001)) == 0x3F81);  // above the tie: up
  CHECK(bf16_from_float(from_bits(0x3F807FFF)) == 0x3F80);  // below the tie: down
  CHECK(bf16_from_float(-0.0f) == 0x8000);
  CHECK(bf16_from_float(INFINITY) == 0x7F80);
  CHECK(bf16_from_float(-INFINITY) == 0xFF80);
  CHECK(bf16_from_float(from_bits(0x7F7FFFFF)) == 0x7F80);  // FLT_MAX rounds past bf16's largest: inf
  CHECK(bf16_from_float(from_bits(0x7F7F7FFF)) == 0x7F7F);  // bf16's largest finite
  CHECK(bf16_from_float(from_bits(0x00000001)) == 0x0000);  // fp32 subnormal, kept as a bf16 subnormal: 0 here
  CHECK(bf16_from_float(from_bits(0x00018000)) == 0x0002);  // tie between subnormals 1 and 2: even
  CHECK(bf16_from_float(from_bits(0x7F800001)) == 0x7FC0);  // signalling NaN stays a NaN
  CHECK(bf16_from_float(from_bits(0xFFC00000)) == 0x7FC0);  // negative NaN too
  CHECK(bf16_from_float(from_bits(0x7FFFFFFF)) == 0x7FC0);  // would carry into the sign if rounded as a number
  CHECK(float_from_bf16(0x3F82) == from_bits(0x3F820000));
}

TEST_CASE("fp16 from fp32: IEEE binary16, ties to even, overflow to inf, subnormals, NaN kept") {
  CHECK(fp16_from_float(1.0f) == 0x3C00);
  CHECK(fp16_from_float(-2.0f) == 0xC000);
  CHECK(fp16_from_float(from_bits(0x3F801000)) == 0x3C00);  // 1 + 2^-11: tie, even below
  CHECK(fp16_from_float(from_bits(0x3F803000)) == 0x3C02);  // 1 + 3 * 2^-11: tie, odd below
  CHECK(fp16_from_float(65504.0f) == 0x7BFF);               // largest finite
  CHECK(fp16_from_float(from_bits(0x477FEFFF)) == 0x7BFF);  // just under the tie with 65536
  CHECK(fp16_from_float(65520.0f) == 0x7C00);               // the tie rounds to even: inf
  CHECK(fp16_from_float(1e6f) == 0x7C00);
  CHECK(fp16_from_float(-1e6f) == 0xFC00);
  CHECK(fp16_from_float(from_bits(0x38800000)) == 0x0400);  // 2^-14, smallest normal
  CHECK(fp16_from_float(from_bits(0x38000000)) == 0x0200);  // 2^-15, a subnormal
  CHECK(fp16_from_float(from_bits(0x33800000)) == 0x0001);  // 2^-24, smallest subnormal
  CHECK(fp16_from_float(from_bits(0x33000000)) == 0x0000);  // 2^-25: tie with 0, even
  CHECK(fp16_from_float(from_bits(0x33000001)) == 0x0001);  // just above it
  CHECK(fp16_from_float(from_bits(0x33C00000)) == 0x0002);  // 1.5 * 2^-24: tie between 1 and 2, even
  CHECK(fp16_from_float(-0.0f) == 0x8000);
  CHECK(fp16_from_float(INFINITY) == 0x7C00);
  CHECK(fp16_from_float(from_bits(0x7FC00000)) == 0x7E00);
  CHECK(fp16_from_float(from_bits(0xFF800001)) == 0xFE00);
  CHECK(float_from_fp16(0x0001) == std::ldexp(1.0f, -24));
  CHECK(float_from_fp16(0x7BFF) == 65504.0f);
  CHECK(std::isinf(float_from_fp16(0xFC00)));
  CHECK(std::isnan(float_from_fp16(0x7E01)));
}

TEST_CASE("every 16-bit value survives fp32 and back; NaNs stay NaN") {
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    CAPTURE(dtype_name(type));
    int wrong = 0;
    for (std::uint32_t v = 0; v <= 0xFFFF; ++v) {
      const auto h = static_cast<std::uint16_t>(v);
      const float wide = float_from_half(h, type);
      const std::uint16_t back = half_from_float(wide, type);
      if (std::isnan(wide) ? !std::isnan(float_from_half(back, type)) : back != h) ++wrong;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("the vectorised spans and the backend's copies equal the scalar definition, tails included") {
  const std::vector<float> values = as_floats(patterns(4099));
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    CAPTURE(dtype_name(type));
    std::vector<std::uint16_t> expected(values.size()), spans(values.size()), backend(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) expected[i] = half_from_float(values[i], type);
    to_half(spans.data(), values.data(), values.size(), type);
    cpu_backend().to_half(backend.data(), values.data(), values.size(), type);
    CHECK(spans == expected);
    CHECK(backend == expected);
    std::vector<float> wide(values.size());
    cpu_backend().from_half(wide.data(), expected.data(), expected.size(), type);
    int wrong = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float scalar = float_from_half(expected[i], type);
      wrong += std::bit_cast<std::uint32_t>(wide[i]) != std::bit_cast<std::uint32_t>(scalar);
    }
    CHECK(wrong == 0);
    std::vector<std::uint16_t> divided(values.size()), sum(values.size());
    to_half_divided(divided.data(), values.data(), values.size(), 3.0f, type);
    add_half(sum.data(), expected.data(), divided.data(), values.size(), type);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::uint16_t d = half_from_float(float_from_half(expected[i], type) / 3.0f, type);
      const std::uint16_t s = half_from_float(float_from_half(expected[i], type) + float_from_half(d, type), type);
      wrong += divided[i] != d || sum[i] != s;
    }
    CHECK(wrong == 0);
  }
  CHECK_THROWS_AS(to_half(nullptr, nullptr, 0, Dtype::fp32), std::invalid_argument);
}

// Digests of PyTorch 1.13's casts (torch.Tensor.to(torch.bfloat16 / torch.float16) and .float()) over patterns(65536)
// and over every 16-bit value. PyTorch's vectorised CPU cast writes a bf16 NaN as 0xFFFF and its scalar
// c10::BFloat16 as 0x7FC0; NaNs were mapped to 0x7FC0 before hashing, the only place the two disagree.
TEST_CASE("fp32 -> bf16 / fp16 and back agree bit for bit with PyTorch's casts") {
  const std::vector<float> values = as_floats(patterns(65536));
  std::vector<std::uint16_t> bf16(values.size()), fp16(values.size());
  to_half(bf16.data(), values.data(), values.size(), Dtype::bf16);
  to_half(fp16.data(), values.data(), values.size(), Dtype::fp16);
  CHECK(fnv1a(bf16) == 0x36348e8dd8c69684ull);
  CHECK(fnv1a(fp16) == 0xb8c5c2eb97266841ull);

  std::vector<std::uint16_t> all(65536);
  for (std::size_t v = 0; v < all.size(); ++v) all[v] = static_cast<std::uint16_t>(v);
  std::vector<float> wide(all.size());
  std::vector<std::uint32_t> bits(all.size());
  from_half(wide.data(), all.data(), all.size(), Dtype::bf16);
  for (std::size_t i = 0; i < wide.size(); ++i) bits[i] = std::bit_cast<std::uint32_t>(wide[i]);
  CHECK(fnv1a(bits) == 0x43a13836c4ca3b25ull);
  from_half(wide.data(), all.data(), all.size(), Dtype::fp16);
  for (std::size_t i = 0; i < wide.size(); ++i) bits[i] = std::bit_cast<std::uint32_t>(wide[i]);
  CHECK(fnv1a(bits) == 0x5d79f1b086f30345ull);
}

TEST_CASE("dtype names parse back; anything else is invalid_argument naming the field") {
  for (Dtype type : {Dtype::fp32, Dtype::bf16, Dtype::fp16}) CHECK(parse_dtype(dtype_name(type), "x").value == type);
  auto bad = parse_dtype("float16", "--ddp-comm-dtype");
  CHECK(bad.status.code() == dtrain::StatusCode::invalid_argument);
  CHECK(bad.status.message().find("--ddp-comm-dtype 'float16'") != std::string::npos);
  CHECK(dtype_bytes(Dtype::bf16) == 2);
  CHECK(dtype_bytes(Dtype::fp32) == 4);
}
