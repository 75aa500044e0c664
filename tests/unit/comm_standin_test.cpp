// The stand-in for a device (trainer/kernels/standin/backend.h, trainer/comm/standin/communicator.h), which the
// device plumbing tests rely on: its memory faults when the host touches it outside an op, a copy or a collective;
// its ops give the CPU backend's numbers; its communicator refuses host pointers as NCCL would.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "trainer/comm/local/communicator.h"
#include "trainer/comm/standin/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/standin/backend.h"

using namespace dtrain::trainer;

namespace comm_standin_test {

// Whether reading *data in a child process kills it with SIGSEGV.
bool read_faults(const float* data) {
  const pid_t child = fork();
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // not the test framework's handler: die of it
    volatile float value = *data;
    (void)value;
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
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

}  // namespace comm_standin_test
