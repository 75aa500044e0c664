// The trainer's buffers in the shm communicator's segment (trainer/parallel/comm_buffers.h), on real ranks (forked
// processes, comm_shm_ranks.h): a model built on CommBuffers has its parameters, gradients and 16-bit working copy in
// the segment (ShmCommunicator::in_segment), ZeRO-2 with 16-bit parameters and gradient reduction trains on them bit
// for bit as on ordinary memory (the segment's pages released by ZeRO read as zeros again, pages.h), and with an arena
// too small for them the buffers fall back to ordinary memory, the notice comes once and training goes on. A
// communicator with device buffers (NCCL's) leaves the model on its backend's memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "comm_shm_ranks.h"
#include "trainer/comm/local/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/model/gpt.h"
#include "trainer/parallel/comm_buffers.h"
#include "trainer/parallel/ddp/reducer.h"
#include "trainer/parallel/zero/engine.h"

using namespace dtrain::trainer;
using shm_test::RankReport;
using shm_test::RunOptions;

namespace {

constexpr int kWorld = 2;

// Big enough that ZeRO-2's releases cover whole pages (a layer's slice is about 200 KB), small enough for
// milliseconds per step.
GptConfig config() {
  GptConfig c;
  c.max_seq_len = 16;
  c.vocab_size = 200;
  c.padded_vocab_size = 256;
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 64;
  return c;
}

std::vector<std::int32_t> tokens(int count, int salt) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = (i * 37 + salt * 11) % 200;
  return out;
}

void check(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error(what);
}

// Three ZeRO-2 steps of 2 micro-steps (B=2, T=8) on this rank's data; the packed fp32 master shards afterwards.
// buffers: the model's CommBuffers, whose bytes from the communicator after the steps land in *in_use.
std::vector<float> train_zero2(Communicator& comm, Gpt& model, const CommBuffers* buffers = nullptr,
                               std::size_t* in_use = nullptr) {
  model.init_weights(3);
  ZeroEngine zero(2, comm, model, AdamWOptions{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f},
                  ZeroDtypes{std::nullopt, model.precision()});
  zero.shard_params();
  for (long t = 1; t <= 3; ++t) {
    zero.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      const int salt = static_cast<int>(t) * 4 + micro * 2 + comm.rank() * 17;
      const auto in = tokens(16, salt), out = tokens(16, salt + 1);
      model.forward(in.data(), out.data(), 2, 8);
      zero.begin_backward(micro == 1);
      model.backward(0.25f, zero.grads_ready());
      zero.finish_backward();
    }
    zero.clip_grad_norm(0.5f);
    zero.step(1e-2f, t);
    zero.refresh_working_params();
  }
  if (buffers != nullptr) *in_use = buffers->communicator_bytes();
  std::vector<float> master;
  for (const ShardSpan& own : zero.shards().owned())
    master.insert(master.end(), model.params() + own.offset, model.params() + own.offset + own.count);
  return master;
}

// One DDP step (fp32 allreduce) of B=2, T=8; the reduced gradients.
std::vector<float> ddp_grads(Communicator& comm, Gpt& model, BufferSource* buffers) {
  model.init_weights(5);
  DdpOptions options;
  options.first_bucket_bytes = 64 << 10;
  options.buffers = buffers;
  DdpReducer ddp(comm, model.grads(), model.num_params(), options);
  const auto in = tokens(16, comm.rank()), out = tokens(16, comm.rank() + 1);
  model.forward(in.data(), out.data(), 2, 8);
  ddp.begin_backward(true);
  model.backward(1.0f, [&](std::size_t offset, std::size_t count) { ddp.grads_ready(offset, count); });
  ddp.finish_backward();
  return {model.grads(), model.grads() + model.num_params()};
}

void expect_ranks_ok(const shm_test::RankRun& run) {
  for (int r = 0; r < kWorld; ++r) {
    CAPTURE(r);
    INFO(run.reports[r].message);
    CHECK(run.reports[r].code == 0);
  }
}

}  // namespace

TEST_CASE("the model's buffers live in the shm segment, and ZeRO-2 in 16 bits trains on them as on ordinary memory") {
  const auto run = shm_test::run_ranks(kWorld, [](ShmCommunicator& comm, RankReport&) {
    int notices = 0;
    CommBuffers buffers(comm, [&](const std::string&) { ++notices; });
    Gpt shared(config(), kernels::cpu_backend(), kWorld, kernels::Dtype::bf16, &buffers);
    const std::size_t n = shared.buffer_size();
    check(comm.in_segment(shared.params(), n * sizeof(float)), "the parameters are not in the segment");
    check(comm.in_segment(shared.grads(), n * sizeof(float)), "the gradients are not in the segment");
    check(comm.in_segment(shared.working_params(), n * sizeof(std::uint16_t)),
          "the working copy is not in the segment");
    Gpt plain(config(), kernels::cpu_backend(), kWorld, kernels::Dtype::bf16);
    check(!comm.in_segment(plain.params(), sizeof(float)), "the backend's memory is in the segment");

    std::size_t in_use = 0;
    const std::vector<float> got = train_zero2(comm, shared, &buffers, &in_use);
    const std::vector<float> want = train_zero2(comm, plain);
    check(got.size() == want.size() && !got.empty(), "shards of different sizes");
    shm_test::expect_same(got.data(), want.data(), got.size(), "ZeRO-2 master shards, segment vs ordinary memory");
    // Parameters, gradients, the working copy and the reducer's 16-bit copy, all from the communicator.
    const std::size_t half_bytes = (n + 1) / 2 * sizeof(float);
    check(in_use == 2 * n * sizeof(float) + 2 * half_bytes, "communicator bytes " + std::to_string(in_use));
    check(buffers.fallback_bytes() == 0 && notices == 0, "a buffer fell back to ordinary memory");
  });
  expect_ranks_ok(run);
}

TEST_CASE("an arena too small for the model: ordinary memory, one notice that says how to fix it, training goes on") {
  RunOptions options;
  options.arena_bytes = 64 << 10;  // 16 pages: less than the parameter buffer's 500 KB
  const auto run = shm_test::run_ranks(kWorld, [](ShmCommunicator& comm, RankReport&) {
    std::vector<std::string> notices;
    CommBuffers buffers(comm, [&](const std::string& message) { notices.push_back(message); });
    Gpt small(config(), kernels::cpu_backend(), 1, kernels::Dtype::fp32, &buffers);
    check(!comm.in_segment(small.params(), sizeof(float)), "the parameters are in a 64 KiB arena");
    check(!comm.in_segment(small.grads(), sizeof(float)), "the gradients are in a 64 KiB arena");
    check(buffers.fallback_bytes() == 2 * small.buffer_size() * sizeof(float), "not all of the model fell back");
    check(notices.size() == 1, "notices: " + std::to_string(notices.size()) + ", expected exactly one");
    for (const char* part : {"the parameter buffer", "ordinary memory", "/dev/shm", "--shm-size"})
      check(notices[0].find(part) != std::string::npos, "the notice lacks '" + std::string(part) + "': " + notices[0]);

    Gpt plain(config());
    const std::vector<float> got = ddp_grads(comm, small, &buffers);
    const std::vector<float> want = ddp_grads(comm, plain, nullptr);
    shm_test::expect_same(got.data(), want.data(), got.size(), "DDP gradients, fallback vs ordinary memory");
    check(notices.size() == 1, "a second notice");
  }, options);
  expect_ranks_ok(run);
}

namespace {

// A communicator whose buffers are device memory, as NCCL's: the model must keep its backend's.
class DeviceBuffersCommunicator : public LocalCommunicator {
 public:
  bool device_buffers() const override { return true; }
};

}  // namespace

TEST_CASE("collective_buffers: the communicator's memory for host buffers, the backend's for device buffers") {
  LocalCommunicator host;
  const auto from_host = collective_buffers(host, kernels::cpu_backend(), {});
  CHECK(dynamic_cast<CommBuffers*>(from_host.get()) != nullptr);
  DeviceBuffersCommunicator device;
  const auto from_device = collective_buffers(device, kernels::cpu_backend(), {});
  CHECK(dynamic_cast<BackendBuffers*>(from_device.get()) != nullptr);
  CHECK_THROWS_AS(CommBuffers(device, {}), std::logic_error);
  float* data = from_host->allocate(1000, "a test buffer");
  CHECK(std::all_of(data, data + 1000, [](float x) { return x == 0.0f; }));
  from_host->release(data);
}
