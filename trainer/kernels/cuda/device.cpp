// The CUDA half of factory.h in a build with CUDA: is there a GPU, and the one backend per device.

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "trainer/kernels/cuda/backend.h"
#include "trainer/kernels/cuda/factory.h"

namespace dtrain::trainer::kernels {
namespace {

std::string visible_devices() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value == nullptr ? "CUDA_VISIBLE_DEVICES unset" : "CUDA_VISIBLE_DEVICES='" + std::string(value) + "'";
}

// The number of visible GPUs, or BackendUnavailable saying why there are none and what to check. The CUDA runtime
// is linked statically and finds the driver (libcuda.so.1) only here, so a node without one gets this error
// rather than failing to start.
int visible_gpus() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    const std::string cause = error != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorName(error) +
                                                         ": " + cudaGetErrorString(error)
                                                   : std::string("cudaGetDeviceCount found 0 devices");
    throw BackendUnavailable("no CUDA GPU is visible (" + cause + "; " + visible_devices() +
                             "): check that nvidia-smi lists a GPU, that CUDA_VISIBLE_DEVICES names it, and that "
                             "the driver supports CUDA 13; or use the cpu backend");
  }
  return count;
}

}  // namespace

Backend& cuda_backend(int device) {
  // The first CUDA call comes before the statics below exist, so that at exit they are destroyed (their streams and
  // memory freed) before the CUDA runtime's own exit handlers, which it registers on that call, run.
  const int count = visible_gpus();
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<CudaBackend>> backends;
  const std::lock_guard lock(mutex);
  if (device < 0 || device >= count) {
    throw BackendUnavailable("no CUDA GPU is visible as device " + std::to_string(device) + " (" +
                             std::to_string(count) + " visible; " + visible_devices() +
                             "): pass a device below " + std::to_string(count) +
                             " (LOCAL_RANK, with one GPU per rank) or make more GPUs visible");
  }
  std::unique_ptr<CudaBackend>& backend = backends[device];
  if (backend == nullptr) backend = std::make_unique<CudaBackend>(device);
  return *backend;
}

bool built_with_cuda() { return true; }

int visible_cuda_devices() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

}  // namespace dtrain::trainer::kernels
