#include "trainer/kernels/cuda/factory.h"

#include "trainer/kernels/cpu/backend.h"

namespace dtrain::trainer::kernels {

Backend& make_backend(const std::string& name, int device) {
  if (name == "cpu") return cpu_backend();
  if (name == "cuda") return cuda_backend(device);
  throw std::invalid_argument("unknown compute backend '" + name + "': use cpu or cuda");
}

}  // namespace dtrain::trainer::kernels
