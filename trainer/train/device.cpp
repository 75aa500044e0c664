#include "trainer/train/device.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "trainer/comm/standin/communicator.h"
#include "trainer/common/env.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/cuda/factory.h"
#include "trainer/kernels/standin/backend.h"

namespace dtrain::trainer {
namespace {

bool is_rank0() {
  const char* rank = std::getenv("RANK");
  return rank == nullptr || std::string(rank) == "0";
}

ComputeDevice cuda_device() {
  ComputeDevice device;
  device.cuda = true;
  const char* standin = std::getenv("DTRAIN_DEVICE_STANDIN");
  if (standin != nullptr && std::string(standin) == "1") {
    device.standin = true;
    device.backend = &kernels::standin_backend();
    if (is_rank0()) {
      spdlog::warn("--device cuda with DTRAIN_DEVICE_STANDIN=1: computing on the host stand-in for a GPU (a check of "
                   "the device/host plumbing, not of CUDA; the numbers are the CPU backend's)");
    }
    return device;
  }
  const int rank_on_node =
      env_setting("LOCAL_RANK", 0, 0, "the launcher sets it to the rank's index on its node");
  const int count = kernels::visible_cuda_devices();
  if (count > 0 && rank_on_node >= count) {
    // Two ranks on one GPU: NCCL refuses it ("Duplicate GPU detected"), so say it here, with the numbers.
    throw std::invalid_argument("--device cuda: this rank is LOCAL_RANK " + std::to_string(rank_on_node) +
                                " and takes GPU " + std::to_string(rank_on_node) + ", but " + std::to_string(count) +
                                " GPU(s) are visible: start at most " + std::to_string(count) +
                                " rank(s) per node (dtrain run -n " + std::to_string(count) +
                                "), or make more GPUs visible (CUDA_VISIBLE_DEVICES)");
  }
  try {
    // With no GPU (or no CUDA in the build) this throws the reason, naming what to check.
    device.gpu = rank_on_node;
    device.backend = &kernels::cuda_backend(device.gpu);
  } catch (const kernels::BackendUnavailable& e) {
    throw std::invalid_argument(std::string("--device cuda: ") + e.what() + " (--device cpu trains on the CPU)");
  }
  return device;
}

// The NCCL communicator for a GPU: DTRAIN_COMM_BACKEND may be unset, auto or nccl; a host backend cannot read
// device memory and is refused.
CommOptions nccl_options() {
  const char* chosen = std::getenv("DTRAIN_COMM_BACKEND");
  const std::string asked = chosen == nullptr ? "" : chosen;
  if (!asked.empty() && asked != "auto" && asked != "nccl") {
    throw std::invalid_argument("DTRAIN_COMM_BACKEND=" + asked + " reduces host memory, but --device cuda keeps the "
                                "gradients on the GPU: unset it (or set nccl), or train with --device cpu");
  }
  CommOptions options;
  options.backend = "nccl";
  return options;
}

}  // namespace

std::string ComputeDevice::name() const {
  if (!cuda) return "cpu";
  return standin ? "cuda-standin" : "cuda:" + std::to_string(gpu);
}

ComputeDevice choose_device(const std::string& device) {
  if (device == "cpu") return ComputeDevice{&kernels::cpu_backend()};
  if (device == "cuda") return cuda_device();
  if (device != "auto") throw std::invalid_argument("--device " + device + ": use cpu, cuda or auto");
  if (kernels::built_with_cuda() && kernels::visible_cuda_devices() > 0) return cuda_device();
  if (is_rank0()) {
    spdlog::info("--device auto: {}; computing on the CPU",
                 kernels::built_with_cuda() ? "no CUDA GPU is visible" : "dtrain-trainer was built without CUDA");
  }
  return ComputeDevice{&kernels::cpu_backend()};
}

std::unique_ptr<Communicator> device_communicator(const ComputeDevice& device) {
  if (!device.cuda) return make_communicator_from_env();
  std::unique_ptr<Communicator> comm =
      device.standin ? standin_communicator(make_communicator_from_env()) : make_communicator_from_env(nccl_options());
  comm->order_after(device.backend->compute_stream());
  return comm;
}

}  // namespace dtrain::trainer
