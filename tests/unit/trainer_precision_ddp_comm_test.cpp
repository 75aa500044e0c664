// DDP with a 16-bit communication dtype over 2 real Gloo ranks (threads of this process, TCP between them):
// gradients equal PyTorch's compression hooks' cast -> divide -> allreduce -> cast back, computed here element by
// element, and half the bytes leave each rank. Also the loss scaler's overflow flag combined with one allreduce.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "worker/store/client.h"
#include "agent/store/testing/in_process_store.h"
#include "tests/unit/gloo_ranks.h"
#include "trainer/comm/gloo/communicator.h"
#include "trainer/comm/local/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/half.h"
#include "trainer/optim/loss_scaler.h"
#include "trainer/parallel/ddp/reducer.h"

using namespace std::chrono_literals;
using dtrain::trainer::Communicator;
using dtrain::trainer::DdpOptions;
using dtrain::trainer::DdpReducer;
using dtrain::trainer::GlooCommOptions;
using dtrain::trainer::GlooCommunicator;
using dtrain::trainer::LocalCommunicator;
using dtrain::trainer::LossScaler;
using dtrain::trainer::kernels::Dtype;
using dtrain::trainer::kernels::dtype_name;
using dtrain::trainer::kernels::float_from_half;
using dtrain::trainer::kernels::half_from_float;

namespace {

constexpr char kToken[] = "precision-ddp-test-token";
constexpr std::size_t kCount = 300'000;
// 64 KiB first bucket, then 256 KiB: several buckets, the last one partial.
const DdpOptions kBuckets{std::size_t{64} << 10, std::size_t{256} << 10};

struct StoreServer : GlooRanks {
  StoreServer() : GlooRanks(kToken) {}
};

// Runs body(rank, comm) on 2 ranks, each a thread with its own Gloo communicator; rethrows the first failure.
void on_two_ranks(StoreServer& server, const std::string& prefix, const std::function<void(int, Communicator&)>& body) {
  on_ranks(server, 2, prefix, body);
}

// Rank r's gradients: normal values over several orders of magnitude, so that rounding matters everywhere.
std::vector<float> gradients(int rank) {
  std::mt19937 rng(100 + rank);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 10);
  std::vector<float> out(kCount);
  for (float& g : out) g = std::ldexp(normal(rng), exponent(rng));
  return out;
}

// Reports the buffer ready in reverse chunks, as backward does, around begin/finish.
void backward_pass(DdpReducer& reducer) {
  reducer.begin_backward(true);
  for (std::size_t end = kCount; end > 0;) {
    const std::size_t size = std::min<std::size_t>(10'007, end);
    reducer.grads_ready(end - size, size);
    end -= size;
  }
  reducer.finish_backward();
}

// bytes written by this process so far (write/writev on any descriptor, the ranks' sockets included).
std::uint64_t process_write_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return 0;
}

struct PassResult {
  std::vector<float> grads[2];
  std::uint64_t bytes_sent[2] = {0, 0};
  std::uint64_t process_bytes = 0;
};

PassResult reduce_on_two_ranks(StoreServer& server, Dtype comm_dtype) {
  PassResult result;
  on_two_ranks(server, std::string("ddp-") + dtype_name(comm_dtype) + "/", [&](int rank, Communicator& comm) {
    std::vector<float> grads = gradients(rank);
    DdpOptions options = kBuckets;
    options.comm_dtype = comm_dtype;
    DdpReducer reducer(comm, grads.data(), grads.size(), options);
    const std::uint64_t written = process_write_bytes();
    backward_pass(reducer);
    if (rank == 0) result.process_bytes = process_write_bytes() - written;
    result.bytes_sent[rank] = reducer.last_stats().bytes_sent;
    result.grads[rank] = std::move(grads);
  });
  return result;
}

}  // namespace

TEST_CASE("bf16 and fp16 DDP over 2 Gloo ranks: PyTorch's compress hook result, half the bytes of fp32") {
  StoreServer server;
  const PassResult fp32 = reduce_on_two_ranks(server, Dtype::fp32);
  CHECK(fp32.bytes_sent[0] == kCount * sizeof(float));  // a 2-rank ring sends 2 (n-1)/n = 1 buffer per rank
  const std::vector<float> g0 = gradients(0), g1 = gradients(1);
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    CAPTURE(dtype_name(type));
    const PassResult half = reduce_on_two_ranks(server, type);
    CHECK(half.grads[0] == half.grads[1]);
    int wrong = 0;
    for (std::size_t i = 0; i < kCount; ++i) {
      // compressed = bucket.to(dtype).div_(world); all_reduce (sum in fp32, rounded); decompress = copy_ to fp32
      auto compressed = [type](float g) {
        return float_from_half(half_from_float(float_from_half(half_from_float(g, type), type) / 2, type), type);
      };
      const float c0 = compressed(g0[i]), c1 = compressed(g1[i]);
      const float expected = float_from_half(half_from_float(c0 + c1, type), type);
      wrong += !(half.grads[0][i] == expected || (std::isnan(expected) && std::isnan(half.grads[0][i])));
    }
    CHECK(wrong == 0);
    CHECK(half.bytes_sent[0] * 2 == fp32.bytes_sent[0]);
    CHECK(half.bytes_sent[1] * 2 == fp32.bytes_sent[1]);
    // What the kernel saw written (both ranks' sockets, plus a little logging): half as well, within 10%.
    const double ratio = static_cast<double>(half.process_bytes) / static_cast<double>(fp32.process_bytes);
    CAPTURE(half.process_bytes);
    CAPTURE(fp32.process_bytes);
    CHECK(ratio > 0.45);
    CHECK(ratio < 0.55);
  }
}

TEST_CASE("one rank: the 16-bit round trip still happens (numerics do not depend on the world size)") {
  LocalCommunicator comm;
  std::vector<float> grads = {1.0f + std::ldexp(1.0f, -12), 3.0f, 1e-30f};
  DdpOptions options;
  options.comm_dtype = Dtype::fp16;
  DdpReducer reducer(comm, grads.data(), grads.size(), options);
  reducer.begin_backward(true);
  reducer.grads_ready(0, grads.size());
  reducer.finish_backward();
  CHECK(grads == std::vector<float>{1.0f, 3.0f, 0.0f});
  CHECK(reducer.last_stats().bytes_sent == 0);
}

TEST_CASE("the loss scaler's overflow flags of 2 ranks combine with one sum-allreduce: both skip and back off") {
  StoreServer server;
  std::vector<float> scales(2);
  std::vector<int> skipped(2);
  on_two_ranks(server, "scaler/", [&](int rank, Communicator& comm) {
    LossScaler scaler(dtrain::trainer::kernels::cpu_backend());
    std::vector<float> shard(1000, scaler.scale());
    if (rank == 1) shard[500] = INFINITY;
    scaler.unscale(shard.data(), shard.size());
    float found = scaler.found_inf();
    comm.allreduce(&found, 1)->wait();
    skipped[rank] = scaler.update(found);
    scales[rank] = scaler.scale();
  });
  CHECK(skipped == std::vector<int>{1, 1});
  CHECK(scales == std::vector<float>{32768.0f, 32768.0f});
}
