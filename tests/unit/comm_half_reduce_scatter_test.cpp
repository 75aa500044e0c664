// Communicator::reduce_scatter_half: over real Gloo ranks (threads of this process, a real store, TCP between them),
// on the local communicator, and the interface's default. Expected sums are computed here from the definition, not
// with the code under test: in Gloo's ring order (chunk c's sum starts at rank c + 1 and adds the next rank's input
// at each step, ending at rank c), each addition done in fp32 and rounded back to the type. The inputs span 17
// binary orders of magnitude, so that the rounding, and its order, change the result (checked below).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/unit/gloo_ranks.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/gloo/communicator.h"
#include "trainer/comm/local/communicator.h"
#include "trainer/kernels/half.h"

using dtrain::trainer::CommError;
using dtrain::trainer::Communicator;
using dtrain::trainer::GlooCommunicator;
using dtrain::trainer::LocalCommunicator;
using dtrain::trainer::Work;
using dtrain::trainer::kernels::Dtype;
using dtrain::trainer::kernels::dtype_name;
using dtrain::trainer::kernels::float_from_half;
using dtrain::trainer::kernels::half_from_float;

namespace {

constexpr char kHalfToken[] = "comm-half-reduce-scatter-test-token";
// 16-bit values in one 1 MiB segment of the Gloo ring.
constexpr std::size_t kSegmentHalves = (std::size_t{1} << 20) / sizeof(std::uint16_t);
// Values per rank: one, part of one segment, and three segments of which the last holds 3 values.
constexpr std::size_t kCounts[] = {1, 12'345, 2 * kSegmentHalves + 3};

struct HalfStoreServer : GlooRanks {
  HalfStoreServer() : GlooRanks(kHalfToken) {}
};

// Rank `rank`'s input at index i (of its whole buffer) as `type`: a sign, a mantissa in [0.5, 1.5) and an exponent
// in [-8, 8] from a hash of (rank, i), so every rank thread can compute any rank's input. Sums of three stay far
// inside fp16's range.
std::uint16_t input(int rank, std::size_t i, Dtype type) {
  std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(rank + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const float mantissa = static_cast<float>(h & 0xFFFFFF) / 0x1p24f + 0.5f;
  const int exponent = static_cast<int>((h >> 24) % 17) - 8;
  const float sign = ((h >> 40) & 1) != 0 ? -1.0f : 1.0f;
  return half_from_float(sign * std::ldexp(mantissa, exponent), type);
}

// One pairwise addition of the 16-bit sum: in fp32, rounded back to `type`.
std::uint16_t add(std::uint16_t a, std::uint16_t b, Dtype type) {
  return half_from_float(float_from_half(a, type) + float_from_half(b, type), type);
}

// Element i of the reduce-scatter's result on rank `chunk` of `size`, in the ring's order:
// ((x[chunk+1] + x[chunk+2]) + ...) + x[chunk], each x at index chunk * count + i of that rank's input.
std::uint16_t ring_sum(int size, int chunk, std::size_t count, std::size_t i, Dtype type) {
  const std::size_t at = static_cast<std::size_t>(chunk) * count + i;
  std::uint16_t sum = input((chunk + 1) % size, at, type);
  for (int step = 2; step <= size; ++step) sum = add(sum, input((chunk + step) % size, at, type), type);
  return sum;
}

// Rank `rank`'s whole input: size * count values.
std::vector<std::uint16_t> inputs(int rank, int size, std::size_t count, Dtype type) {
  std::vector<std::uint16_t> in(static_cast<std::size_t>(size) * count);
  for (std::size_t j = 0; j < in.size(); ++j) in[j] = input(rank, j, type);
  return in;
}

// The CommError message `call` throws; fails the test when it throws nothing.
std::string half_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const CommError& error) {
    return error.what();
  }
  FAIL("expected a CommError");
  return "";
}

// Bytes this process has written so far (write/writev on any descriptor, the ranks' sockets included).
std::uint64_t process_write_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return 0;
}

}  // namespace

TEST_CASE("the test's inputs make the ring's order and its per-addition rounding visible") {
  const std::size_t count = kCounts[2];
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    CAPTURE(dtype_name(type));
    std::size_t not_ring = 0;
    std::size_t other_order = 0;
    std::size_t rounded_once = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint16_t x0 = input(0, i, type), x1 = input(1, i, type), x2 = input(2, i, type);
      const std::uint16_t ring = ring_sum(3, 0, count, i, type);
      not_ring += ring != add(add(x1, x2, type), x0, type);
      other_order += ring != add(add(x0, x1, type), x2, type);
      const float exact = float_from_half(x0, type) + float_from_half(x1, type) + float_from_half(x2, type);
      rounded_once += ring != half_from_float(exact, type);
    }
    CHECK(not_ring == 0);
    // A ring that added in another order, or summed in fp32 and rounded once, would fail thousands of elements.
    CHECK(other_order > count / 100);
    CHECK(rounded_once > count / 100);
  }
}

TEST_CASE("gloo reduce_scatter_half on 1, 2 and 3 ranks, bf16 and fp16, out of and in place: the ring's sums exactly") {
  HalfStoreServer server;
  for (int size : {1, 2, 3}) {
    CAPTURE(size);
    on_ranks(server, size, "half/" + std::to_string(size) + "/", [size](int rank, GlooCommunicator& comm) {
      for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
        CAPTURE(dtype_name(type));
        for (std::size_t count : kCounts) {
          CAPTURE(count);
          std::vector<std::uint16_t> in = inputs(rank, size, count, type);
          std::vector<std::uint16_t> out(count, 0xFFFF);
          comm.reduce_scatter_half(in.data(), out.data(), count, type)->wait();
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < count; ++i) wrong += out[i] != ring_sum(size, rank, count, i, type);
          CHECK(wrong == 0);
          // In place: the output is this rank's own chunk of the input.
          std::uint16_t* own = in.data() + static_cast<std::size_t>(rank) * count;
          comm.reduce_scatter_half(in.data(), own, count, type)->wait();
          CHECK(std::equal(out.begin(), out.end(), own));
        }
      }
    });
  }
}

TEST_CASE("gloo reduce_scatter_half counts half the bytes of reduce_scatter, and refuses fp32 before sending") {
  HalfStoreServer server;
  const std::size_t count = kCounts[2];
  for (int size : {2, 3}) {
    CAPTURE(size);
    on_ranks(server, size, "bytes/" + std::to_string(size) + "/", [size, count](int rank, GlooCommunicator& comm) {
      std::vector<float> floats(static_cast<std::size_t>(size) * count, 1.0f);
      std::uint64_t before = comm.bytes_sent();
      comm.reduce_scatter(floats.data(), floats.data() + rank * count, count)->wait();
      const std::uint64_t float_bytes = comm.bytes_sent() - before;

      std::vector<std::uint16_t> halves = inputs(rank, size, count, Dtype::bf16);
      before = comm.bytes_sent();
      comm.reduce_scatter_half(halves.data(), halves.data() + rank * count, count, Dtype::bf16)->wait();
      const std::uint64_t half_bytes = comm.bytes_sent() - before;
      CHECK(half_bytes * 2 == float_bytes);
      CHECK(half_bytes == static_cast<std::uint64_t>(size - 1) * count * sizeof(std::uint16_t));

      before = comm.bytes_sent();
      const std::string message = half_error_of(
          [&] { comm.reduce_scatter_half(halves.data(), halves.data() + rank * count, count, Dtype::fp32); });
      CHECK(message.find("gloo reduce_scatter of " + std::to_string(count) + " fp32 values per rank") !=
            std::string::npos);
      CHECK(message.find("use reduce_scatter() for fp32") != std::string::npos);
      CHECK(comm.bytes_sent() == before);
      // Still usable: the refusal queued nothing, so the ranks stay in step.
      comm.reduce_scatter_half(halves.data(), halves.data() + rank * count, count, Dtype::bf16)->wait();
    });
  }
}

TEST_CASE("gloo reduce_scatter_half writes half the bytes of reduce_scatter to the sockets") {
  HalfStoreServer server;
  constexpr int kSize = 3;
  const std::size_t count = kCounts[2];
  // Each run joins fresh communicators, so both carry the same rendezvous traffic on top of their collective.
  const auto written = [&](const std::string& prefix, const std::function<void(int, GlooCommunicator&)>& body) {
    const std::uint64_t start = process_write_bytes();
    on_ranks(server, kSize, prefix, body);
    return process_write_bytes() - start;
  };
  const std::uint64_t float_written = written("wire-fp32/", [count](int rank, GlooCommunicator& comm) {
    std::vector<float> floats(kSize * count, 1.0f);
    comm.reduce_scatter(floats.data(), floats.data() + rank * count, count)->wait();
  });
  const std::uint64_t half_written = written("wire-fp16/", [count](int rank, GlooCommunicator& comm) {
    std::vector<std::uint16_t> halves = inputs(rank, kSize, count, Dtype::fp16);
    comm.reduce_scatter_half(halves.data(), halves.data() + rank * count, count, Dtype::fp16)->wait();
  });
  CAPTURE(float_written);
  CAPTURE(half_written);
  const double ratio = static_cast<double>(half_written) / static_cast<double>(float_written);
  CHECK(ratio > 0.45);
  CHECK(ratio < 0.55);
}

TEST_CASE("local reduce_scatter_half copies the one chunk, leaves it in place, sends nothing and refuses fp32") {
  LocalCommunicator comm;
  std::vector<std::uint16_t> in = {0x3F80, 0x4049, 0xC2F7};
  std::vector<std::uint16_t> out(in.size(), 0);
  comm.reduce_scatter_half(in.data(), out.data(), in.size(), Dtype::bf16)->wait();
  CHECK(out == in);
  auto work = comm.reduce_scatter_half(in.data(), in.data(), in.size(), Dtype::fp16);
  CHECK(work->done());
  CHECK(in == out);
  CHECK(comm.bytes_sent() == 0);
  const std::string message =
      half_error_of([&] { comm.reduce_scatter_half(in.data(), out.data(), in.size(), Dtype::fp32); });
  CHECK(message.find("local reduce_scatter of 3 values per rank") != std::string::npos);
  CHECK(message.find("use reduce_scatter() for fp32") != std::string::npos);
}

namespace {

// A backend with only the fp32 collectives, none of which this test calls.
class Fp32OnlyCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "fp32-only"; }
  std::shared_ptr<Work> allreduce(float*, std::size_t) override { throw std::logic_error("unused"); }
  std::shared_ptr<Work> reduce_scatter(const float*, float*, std::size_t) override {
    throw std::logic_error("unused");
  }
  std::shared_ptr<Work> all_gather(const float*, float*, std::size_t) override { throw std::logic_error("unused"); }
  std::shared_ptr<Work> broadcast(float*, std::size_t, int) override { throw std::logic_error("unused"); }
};

}  // namespace

TEST_CASE("a backend without reduce_scatter_half refuses it with a CommError naming the backend and the fix") {
  Fp32OnlyCommunicator comm;
  std::vector<std::uint16_t> in(24), out(12);
  const std::string message =
      half_error_of([&] { comm.reduce_scatter_half(in.data(), out.data(), 12, Dtype::fp16); });
  CHECK(message.find("the fp32-only communicator has no 16-bit reduce_scatter (asked for 12 fp16 values per rank)") !=
        std::string::npos);
  CHECK(message.find("use reduce_scatter() on fp32, or the gloo or nccl backend") != std::string::npos);
}
