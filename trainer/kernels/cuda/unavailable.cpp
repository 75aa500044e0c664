// The CUDA half of factory.h in a build without CUDA (-DDTRAIN_WITH_CUDA=OFF, or AUTO without nvcc or cuBLASLt).

#include "trainer/kernels/cuda/factory.h"

namespace dtrain::trainer::kernels {

Backend& cuda_backend(int) {
  throw BackendUnavailable(
      "dtrain was built without CUDA (DTRAIN_WITH_CUDA was OFF, or AUTO found no nvcc or cuBLASLt at configure "
      "time): rebuild with the CUDA 13 toolkit installed and -DDTRAIN_WITH_CUDA=ON, or use the cpu backend");
}

bool built_with_cuda() { return false; }

int visible_cuda_devices() { return 0; }

}  // namespace dtrain::trainer::kernels
