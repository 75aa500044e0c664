// The stand-in for a device (trainer/kernels/standin/backend.h, trainer/comm/standin/communicator.h), which the
// device plumbing tests rely on: its memory faults when the host touches it (reads and writes) outside an op, a copy
// or a collective, and opens nestably; its ops give the CPU backend's numbers bit for bit (int32 token ids kept in its
// memory among them); its buffers are zero-filled, reused ones too; its communicator, as a device communicator does,
// refuses a host pointer in either buffer of every collective, fp32 and 16-bit, and leaves the memory closed whether
// the collective succeeds or fails.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainer/comm/local/communicator.h"
#include "trainer/comm/standin/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/standin/backend.h"

using namespace dtrain::trainer;

namespace trainer_standin_test {

// Whether `touch` kills a child process with SIGSEGV.
bool faults(const std::function<void()>& touch) {
  const pid_t child = fork();
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // not the test framework's handler: die of it
    touch();
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

bool read_faults(const void* data) {
  return faults([data] {
    volatile unsigned char value = *static_cast<const volatile unsigned char*>(data);
    (void)value;
  });
}

bool write_faults(void* data) {
  return faults([data] { *static_cast<volatile unsigned char*>(data) = 1; });
}

std::vector<float> pattern(std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.013f * static_cast<float>((i * 7 + salt) % 29) - 0.17f;
  return v;
}

// A stand-in buffer holding `host`.
float* device_copy(kernels::Backend& device, const std::vector<float>& host) {
  float* data = device.allocate(host.size());
  device.copy_in(data, host.data(), host.size() * sizeof(float));
  return data;
}

std::vector<float> host_copy(kernels::Backend& device, const float* data, std::size_t n) {
  std::vector<float> host(n);
  device.copy_out(host.data(), data, n * sizeof(float));
  return host;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("the stand-in's layernorm, AdamW and embedding give the CPU backend's bits") {
  kernels::Backend& device = kernels::standin_backend();
  kernels::Backend& cpu = kernels::cpu_backend();
  CHECK(device.name() == "cuda-standin");

  SUBCASE("layernorm_forward") {
    const int N = 5, C = 24;
    const std::vector<float> inp = pattern(N * C, 1), weight = pattern(C, 2), bias = pattern(C, 3);
    std::vector<float> out(N * C), mean(N), rstd(N);
    cpu.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    float* d_inp = device_copy(device, inp);
    float* d_weight = device_copy(device, weight);
    float* d_bias = device_copy(device, bias);
    float* d_out = device.allocate(out.size());
    float* d_mean = device.allocate(N);
    float* d_rstd = device.allocate(N);
    device.layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, N, C);
    CHECK(same_bits(host_copy(device, d_out, out.size()), out));
    CHECK(same_bits(host_copy(device, d_mean, N), mean));
    CHECK(same_bits(host_copy(device, d_rstd, N), rstd));
    CHECK(read_faults(d_out));
    for (float* p : {d_inp, d_weight, d_bias, d_out, d_mean, d_rstd}) device.release(p);
  }

  SUBCASE("adamw_update, three steps") {
    const std::size_t n = 1000;
    std::vector<float> params = pattern(n, 4), m(n), v(n);
    const std::vector<float> grads = pattern(n, 5);
    float* d_params = device_copy(device, params);
    float* d_grads = device_copy(device, grads);
    float* d_m = device.allocate(n);
    float* d_v = device.allocate(n);
    for (long t = 1; t <= 3; ++t) {
      cpu.adamw_update(params.data(), grads.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
      device.adamw_update(d_params, d_grads, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    CHECK(same_bits(host_copy(device, d_params, n), params));
    CHECK(same_bits(host_copy(device, d_m, n), m));
    CHECK(same_bits(host_copy(device, d_v, n), v));
    for (float* p : {d_params, d_grads, d_m, d_v}) device.release(p);
  }

  SUBCASE("embedding_forward with the token ids in the stand-in's memory") {
    const int B = 2, T = 3, C = 8, V = 11;
    const std::vector<std::int32_t> tokens = {3, 0, 10, 7, 7, 1};
    const std::vector<float> wte = pattern(V * C, 6), wpe = pattern(T * C, 7);
    std::vector<float> out(B * T * C);
    cpu.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    // int32 ids in a buffer of as many floats (4 bytes each), as the trainer keeps them.
    float* d_tokens = device.allocate(tokens.size());
    device.copy_in(d_tokens, tokens.data(), tokens.size() * sizeof(std::int32_t));
    float* d_wte = device_copy(device, wte);
    float* d_wpe = device_copy(device, wpe);
    float* d_out = device.allocate(out.size());
    device.embedding_forward(d_out, reinterpret_cast<const std::int32_t*>(d_tokens), d_wte, d_wpe, B, T, C);
    CHECK(same_bits(host_copy(device, d_out, out.size()), out));
    CHECK(read_faults(d_tokens));
    for (float* p : {d_tokens, d_wte, d_wpe, d_out}) device.release(p);
  }
}

TEST_CASE("the stand-in's buffers are zero-filled, reused ones too, and owned whole") {
  kernels::Backend& device = kernels::standin_backend();
  const std::size_t n = 3000;
  float* a = device_copy(device, std::vector<float>(n, 7.0f));
  CHECK(kernels::standin_owns(a, n * sizeof(float)));
  device.release(a);
  float* b = device.allocate(n);  // likely a's memory again: zeroed all the same
  CHECK(host_copy(device, b, n) == std::vector<float>(n, 0.0f));
  device.copy_in(b, std::vector<float>(n, 1.0f).data(), n * sizeof(float));
  device.zero(b, n);
  CHECK(host_copy(device, b, n) == std::vector<float>(n, 0.0f));

  std::vector<float> host(n);
  CHECK_FALSE(kernels::standin_owns(host.data(), n * sizeof(float)));
  CHECK_FALSE(kernels::standin_owns(nullptr, sizeof(float)));
  CHECK_FALSE(kernels::standin_owns(b, std::size_t{1} << 40));  // runs past everything handed out
  CHECK(device.allocate(0) == nullptr);
  device.release(nullptr);
  device.release(b);
}

TEST_CASE("host writes fault as reads do, and the memory opens nestably") {
  kernels::Backend& device = kernels::standin_backend();
  float* data = device.allocate(16);
  CHECK(write_faults(data));
  CHECK(write_faults(data + 15));
  {
    const kernels::StandinOpen outer;
    {
      const kernels::StandinOpen inner;
      CHECK_FALSE(write_faults(data));
    }
    CHECK_FALSE(read_faults(data));  // still open: the outer one holds it
    data[3] = 4.0f;                  // what an op may do
  }
  CHECK(read_faults(data));
  CHECK(write_faults(data));
  CHECK(host_copy(device, data, 16)[3] == 4.0f);
  device.release(data);
}

// Expects `issue` to throw the stand-in's refusal of a host pointer.
void check_refused(const std::function<void()>& issue) {
  try {
    issue();
    FAIL("a host pointer was taken");
  } catch (const CommError& e) {
    CHECK(std::string(e.what()).find("a host pointer was passed to a device collective") != std::string::npos);
  }
}

TEST_CASE("every collective of the stand-in communicator refuses host pointers and closes the memory after it") {
  StandinCommunicator comm(std::make_unique<LocalCommunicator>());
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(comm.backend() == "local+standin");
  const std::size_t n = 8;
  const std::vector<float> values = pattern(n, 8);
  std::vector<float> host(n);
  auto* host16 = reinterpret_cast<std::uint16_t*>(host.data());
  float* in = comm.allocate(n);
  float* out = comm.allocate(n);
  auto* in16 = reinterpret_cast<std::uint16_t*>(in);
  auto* out16 = reinterpret_cast<std::uint16_t*>(out);
  comm.copy_in(in, values.data(), n);
  CHECK(read_faults(in));

  SUBCASE("fp32") {
    check_refused([&] { comm.reduce_scatter(host.data(), out, n); });
    check_refused([&] { comm.reduce_scatter(in, host.data(), n); });
    check_refused([&] { comm.all_gather(host.data(), out, n); });
    check_refused([&] { comm.all_gather(in, host.data(), n); });
    check_refused([&] { comm.broadcast(host.data(), n, 0); });
    check_refused([&] { comm.allreduce(in, std::size_t{1} << 38); });  // starts in the memory, runs past its end
    CHECK(read_faults(in));  // a refusal opens nothing

    std::vector<float> back(n);
    comm.reduce_scatter(in, out, n)->wait();
    CHECK(read_faults(out));
    comm.copy_out(back.data(), out, n);
    CHECK(back == values);
    comm.all_gather(in, out, n)->wait();
    CHECK(read_faults(out));
    comm.broadcast(in, n, 0)->wait();
    CHECK(read_faults(in));
    comm.copy_out(back.data(), in, n);
    CHECK(back == values);
    CHECK(comm.bytes_sent() == 0);  // one rank sends nothing
  }

  SUBCASE("16-bit") {
    check_refused([&] { comm.allreduce_half(host16, n, kernels::Dtype::bf16); });
    check_refused([&] { comm.all_gather_half(host16, out16, n); });
    check_refused([&] { comm.all_gather_half(in16, host16, n); });
    check_refused([&] { comm.reduce_scatter_half(host16, out16, n, kernels::Dtype::fp16); });
    check_refused([&] { comm.reduce_scatter_half(in16, host16, n, kernels::Dtype::fp16); });
    CHECK(read_faults(in));

    comm.allreduce_half(in16, n, kernels::Dtype::bf16)->wait();
    CHECK(read_faults(in));
    comm.all_gather_half(in16, out16, n)->wait();
    CHECK(read_faults(out));
    comm.reduce_scatter_half(in16, out16, n, kernels::Dtype::fp16)->wait();
    CHECK(read_faults(out));
    std::vector<float> a(n), b(n);
    comm.copy_out(a.data(), in, n);
    comm.copy_out(b.data(), out, n);
    CHECK(std::memcmp(a.data(), b.data(), n * sizeof(std::uint16_t)) == 0);  // the 16-bit values, unchanged

    // The host communicator's own failure (fp32 to a 16-bit reduce_scatter) comes through and closes the memory.
    CHECK_THROWS_AS(comm.reduce_scatter_half(in16, out16, n, kernels::Dtype::fp32), CommError);
    CHECK(read_faults(in));
  }

  comm.release(in);
  comm.release(out);
}

TEST_CASE("the stand-in's memory faults on host access outside its ops and copies") {
  kernels::Backend& device = kernels::standin_backend();
  CHECK_FALSE(device.host_accessible());
  CHECK(device.compute_stream() != nullptr);
  float* buffer = device.allocate(1000);
  const std::vector<float> host(1000, 2.5f);
  device.copy_in(buffer, host.data(), host.size() * sizeof(float));
  CHECK(read_faults(buffer));
  std::vector<float> back(1000);
  device.copy_out(back.data(), buffer, back.size() * sizeof(float));
  CHECK(back == host);
  {
    const kernels::StandinOpen open;
    CHECK_FALSE(read_faults(buffer));  // the child inherits the open mapping
  }
  CHECK(read_faults(buffer));
  device.release(buffer);
}

TEST_CASE("the stand-in's ops give the CPU backend's numbers, bit for bit") {
  kernels::Backend& device = kernels::standin_backend();
  kernels::Backend& cpu = kernels::cpu_backend();
  const int N = 6, C = 8, OC = 5;
  std::vector<float> inp(N * C), weight(OC * C), bias(OC);
  for (std::size_t i = 0; i < inp.size(); ++i) inp[i] = 0.01f * static_cast<float>((i * 7) % 23) - 0.1f;
  for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = 0.02f * static_cast<float>((i * 5) % 17) - 0.15f;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * static_cast<float>(i);
  std::vector<float> want(N * OC);
  cpu.matmul_forward(want.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  float* d_inp = device.allocate(inp.size());
  float* d_weight = device.allocate(weight.size());
  float* d_bias = device.allocate(bias.size());
  float* d_out = device.allocate(want.size());
  device.copy_in(d_inp, inp.data(), inp.size() * sizeof(float));
  device.copy_in(d_weight, weight.data(), weight.size() * sizeof(float));
  device.copy_in(d_bias, bias.data(), bias.size() * sizeof(float));
  device.matmul_forward(d_out, d_inp, d_weight, d_bias, N, C, OC);
  std::vector<float> got(want.size());
  device.copy_out(got.data(), d_out, got.size() * sizeof(float));
  CHECK(got == want);
  CHECK(device.sum_squares(d_out, want.size()) == cpu.sum_squares(want.data(), want.size()));
  for (float* p : {d_inp, d_weight, d_bias, d_out}) device.release(p);
}

TEST_CASE("the stand-in communicator takes only the stand-in's memory, as a device communicator does") {
  StandinCommunicator comm(std::make_unique<LocalCommunicator>());
  CHECK(comm.device_buffers());
  CHECK(comm.backend() == "local+standin");
  CHECK(comm.order_after_stream() == nullptr);
  comm.order_after(kernels::standin_backend().compute_stream());
  CHECK(comm.order_after_stream() == kernels::standin_backend().compute_stream());
  std::vector<float> host(4, 1.0f);
  try {
    comm.allreduce(host.data(), host.size());
    FAIL("a host pointer was taken");
  } catch (const CommError& e) {
    CHECK(std::string(e.what()).find("a host pointer was passed to a device collective") != std::string::npos);
  }
  float* buffer = comm.allocate(4);
  comm.copy_in(buffer, host.data(), 4);
  comm.allreduce(buffer, 4)->wait();
  CHECK(read_faults(buffer));  // closed again once the collective returned
  std::vector<float> back(4);
  comm.copy_out(back.data(), buffer, 4);
  CHECK(back == host);
  comm.release(buffer);
}

}  // namespace trainer_standin_test
