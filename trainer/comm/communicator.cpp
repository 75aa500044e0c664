#include "trainer/comm/communicator.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "trainer/comm/gloo/communicator.h"
#include "trainer/comm/local/communicator.h"
#include "trainer/comm/shm/communicator.h"
#include "trainer/common/env.h"
#ifdef DTRAIN_HAVE_NCCL
#include "trainer/comm/nccl/communicator.h"
#endif

namespace dtrain::trainer {

namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool done() const override { return true; }
};

}  // namespace

std::shared_ptr<Work> done_work() { return std::make_shared<DoneWork>(); }
namespace {

// The integer value of a variable the launcher sets, or `fallback` when it is unset; CommError when it is not an
// integer.
int launcher_int(const char* name, int fallback) {
  Result<int> value = env_int(name, fallback, "the launcher (dtrain run/launch, torchrun) sets it for every worker");
  if (!value.ok()) throw CommError(value.status.message());
  return value.value;
}

// options.backend with "auto" resolved through DTRAIN_COMM_BACKEND (unset: gloo); "gloo", "shm" or "nccl".
std::string chosen_backend(const CommOptions& options) {
  std::string backend = options.backend;
  std::string from = "CommOptions::backend";
  if (backend == "auto") {
    const char* raw = std::getenv("DTRAIN_COMM_BACKEND");
    backend = raw != nullptr && *raw != '\0' ? raw : "gloo";
    from = "DTRAIN_COMM_BACKEND";
  }
  if (backend != "gloo" && backend != "shm" && backend != "nccl") {
    throw CommError(from + "='" + backend + "' is not a communication backend; use gloo (CPU, any nodes), shm (CPU, "
                    "the ranks of one node) or nccl (GPU)");
  }
  return backend;
}

}  // namespace

float* Communicator::allocate(std::size_t count) {
  if (count == 0) return nullptr;
  float* data = new (std::nothrow) float[count];
  if (data == nullptr) {
    throw CommError("cannot allocate " + std::to_string(count) + " floats of host memory for a " + backend() +
                    " buffer");
  }
  return data;
}

void Communicator::release(float* data) { delete[] data; }

void Communicator::copy_in(float* buffer, const float* host, std::size_t count) {
  if (count > 0) std::memcpy(buffer, host, count * sizeof(float));
}

void Communicator::copy_out(float* host, const float* buffer, std::size_t count) {
  if (count > 0) std::memcpy(host, buffer, count * sizeof(float));
}

std::shared_ptr<Work> Communicator::allreduce_half(std::uint16_t*, std::size_t count, kernels::Dtype type) {
  throw CommError("the " + backend() + " communicator has no 16-bit allreduce (asked for " + std::to_string(count) +
                  " " + kernels::dtype_name(type) + " values); use allreduce() on fp32, or the gloo or nccl backend");
}

std::shared_ptr<Work> Communicator::all_gather_half(const std::uint16_t*, std::uint16_t*, std::size_t count_per_rank) {
  throw CommError("the " + backend() + " communicator has no 16-bit all_gather (asked for " +
                  std::to_string(count_per_rank) + " values per rank); use all_gather() on fp32, or the gloo or "
                  "nccl backend");
}

std::shared_ptr<Work> Communicator::reduce_scatter_half(const std::uint16_t*, std::uint16_t*,
                                                        std::size_t count_per_rank, kernels::Dtype type) {
  throw CommError("the " + backend() + " communicator has no 16-bit reduce_scatter (asked for " +
                  std::to_string(count_per_rank) + " " + kernels::dtype_name(type) + " values per rank); use "
                  "reduce_scatter() on fp32, or the gloo or nccl backend");
}

void Communicator::refuse_fp32(kernels::Dtype type, const std::string& what, const char* fp32_collective) const {
  if (type != kernels::Dtype::fp32) return;
  throw CommError(backend() + " " + what + ": the 16-bit collective takes bf16 or fp16, not fp32; use " +
                  fp32_collective + "() for fp32 buffers");
}

std::uint64_t ring_bytes_per_rank(Collective collective, std::uint64_t buffer_bytes, int ranks) {
  if (ranks <= 1) return 0;
  const std::uint64_t n = static_cast<std::uint64_t>(ranks);
  switch (collective) {
    case Collective::allreduce: return 2 * (n - 1) * buffer_bytes / n;
    case Collective::reduce_scatter:
    case Collective::all_gather: return (n - 1) * buffer_bytes / n;
    case Collective::broadcast: return buffer_bytes;
  }
  return 0;
}

std::unique_ptr<Communicator> make_communicator_from_env(const CommOptions& options) {
  const std::string backend = chosen_backend(options);
#ifndef DTRAIN_HAVE_NCCL
  if (backend == "nccl") {
    throw CommError("dtrain was built without NCCL (the CUDA toolkit or NCCL's nccl.h / libnccl were not found "
                    "when it was configured, or it was configured with -DDTRAIN_WITH_NCCL=OFF), so the nccl "
                    "backend is not available; use the gloo backend, or rebuild dtrain on a machine with CUDA and "
                    "NCCL (e.g. under /usr/local/cuda)");
  }
#endif
  const int world = launcher_int("WORLD_SIZE", 1);
  if (world < 1) {
    throw CommError("WORLD_SIZE=" + std::to_string(world) + " must be at least 1");
  }
#ifdef DTRAIN_HAVE_NCCL
  if (backend == "nccl") {
    if (world > 1 && std::getenv("RANK") == nullptr) {
      throw CommError("RANK is not set but WORLD_SIZE=" + std::to_string(world) +
                      "; start workers with dtrain run/launch (or torchrun), which set both");
    }
    const int rank = launcher_int("RANK", 0);
    if (rank < 0 || rank >= world) {
      throw CommError("RANK=" + std::to_string(rank) + " is outside [0, WORLD_SIZE=" + std::to_string(world) + ")");
    }
    const int local_rank = launcher_int("LOCAL_RANK", 0);
    if (local_rank < 0) throw CommError("LOCAL_RANK=" + std::to_string(local_rank) + " must be at least 0");
    return NcclCommunicator::from_env(rank, world, local_rank, options);
  }
#endif
  if (world == 1) return std::make_unique<LocalCommunicator>();
  if (std::getenv("RANK") == nullptr) {
    throw CommError("RANK is not set but WORLD_SIZE=" + std::to_string(world) +
                    "; start workers with dtrain run/launch (or torchrun), which set both");
  }
  const int rank = launcher_int("RANK", 0);
  if (rank < 0 || rank >= world) {
    throw CommError("RANK=" + std::to_string(rank) + " is outside [0, WORLD_SIZE=" + std::to_string(world) + ")");
  }
  if (backend == "shm") return ShmCommunicator::from_env(rank, world, options);
  return GlooCommunicator::from_env(rank, world, options);
}

}  // namespace dtrain::trainer
