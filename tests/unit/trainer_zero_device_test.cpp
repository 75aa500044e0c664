// ZeRO on device memory (trainer/parallel/zero/engine.h, "On a GPU"): a model whose backend is not host_accessible()
// and a communicator that takes device buffers. The "device" is the stand-in (trainer/kernels/standin/backend.h):
// the CPU backend behind memory the host cannot touch outside its ops, copies and the stand-in communicator's
// collectives, so a host read or write of a device buffer in the engine is a SIGSEGV (while the other rank's thread
// has the memory open, such an access can go unnoticed: a rank per process, as test_trainer_device.py runs them,
// closes that gap). Over 2 Gloo ranks (threads of this process) every stage and
// precision trains exactly as the host path does: the same gradient norms, parameters and moments, bit for bit.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "small_gpt_config.h"
#include "tests/unit/gloo_ranks.h"
#include "trainer/comm/standin/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/standin/backend.h"
#include "trainer/model/gpt.h"
#include "trainer/model/host_mirror.h"
#include "trainer/parallel/zero/engine.h"

using namespace dtrain::trainer;
using kernels::Dtype;

namespace {

struct Run {
  std::vector<float> norms, losses, params, m, v;
};

struct Config {
  int stage;
  Dtype precision;
  std::optional<Dtype> param;
  Dtype reduce;
};

// Two optimizer steps of two micro-steps each on `backend` (K = 2, W = 2), then the checkpoint's gathers.
Run train(const Config& c, Communicator& comm, kernels::Backend& backend) {
  Gpt model(small_gpt_config(), backend, 2, c.precision);
  model.init_weights(9);
  ZeroEngine zero(c.stage, comm, model, AdamWOptions{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f}, ZeroDtypes{c.param, c.reduce});
  zero.shard_params();
  Run run;
  std::vector<std::int32_t> in(16), out(16);
  for (long t = 1; t <= 2; ++t) {
    zero.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      for (int i = 0; i < 16; ++i) {
        in[i] = (i * 37 + comm.rank() * 5 + micro * 3 + static_cast<int>(t) * 7) % 200;
        out[i] = (i * 41 + comm.rank() * 13 + micro + static_cast<int>(t)) % 200;
      }
      run.losses.push_back(model.forward(in.data(), out.data(), 2, 8));
      zero.begin_backward(micro == 1);
      model.backward(0.25f, zero.grads_ready());
      zero.finish_backward();
    }
    run.norms.push_back(zero.clip_grad_norm(0.5f));
    zero.step(1e-2f, t);
    zero.refresh_working_params();
  }
  zero.gather_moments(run.m, run.v);
  zero.gather_params();
  {
    const HostMirror params(backend, static_cast<const float*>(model.params()), model.buffer_size());
    run.params.assign(params.data(), params.data() + model.buffer_size());
  }
  zero.release_params();
  // Resume's way in: the moments back into the shards, and out again unchanged.
  zero.load_moments(run.m.data(), run.v.data());
  std::vector<float> m, v;
  zero.gather_moments(m, v);
  CHECK(m == run.m);
  CHECK(v == run.v);
  return run;
}

}  // namespace

TEST_CASE("ZeRO on device memory trains exactly as on the host, without touching a device buffer from the host") {
  GlooRanks ranks("zero-device-test-token");
  const std::vector<Config> configs = {
      {1, Dtype::fp32, std::nullopt, Dtype::fp32},    {2, Dtype::fp32, std::nullopt, Dtype::fp32},
      {3, Dtype::fp32, std::nullopt, Dtype::fp32},    {1, Dtype::bf16, std::nullopt, Dtype::bf16},
      {2, Dtype::bf16, std::nullopt, Dtype::bf16},    {3, Dtype::bf16, std::nullopt, Dtype::bf16},
      {2, Dtype::bf16, Dtype::fp32, Dtype::fp32},     {3, Dtype::bf16, Dtype::fp32, Dtype::fp16},
  };
  for (std::size_t index = 0; index < configs.size(); ++index) {
    const Config& c = configs[index];
    const std::string precision = kernels::dtype_name(c.precision);
    CAPTURE(index);
    CAPTURE(c.stage);
    CAPTURE(precision);
    const std::string prefix = "device/" + std::to_string(index) + "/";
    Run host[2], device[2];
    on_ranks(ranks, 2, prefix + "host/", [&](int rank, GlooCommunicator& comm) {
      host[rank] = train(c, comm, kernels::cpu_backend());
    });
    on_ranks(ranks, 2, prefix + "device/", [&](int rank, GlooCommunicator& gloo) {
      StandinCommunicator comm(gloo);
      device[rank] = train(c, comm, kernels::standin_backend());
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(device[r].losses == host[r].losses);
      CHECK(device[r].norms == host[r].norms);
      CHECK(device[r].params == host[r].params);
      CHECK(device[r].m == host[r].m);
      CHECK(device[r].v == host[r].v);
    }
    CHECK(host[0].params == host[1].params);
    CHECK(host[0].m == host[1].m);
  }
}
