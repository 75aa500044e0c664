// kernels::make_backend (trainer/kernels/cuda/factory.h): the same answers in every build. Here no GPU is ever
// visible (CUDA_VISIBLE_DEVICES is emptied before the first CUDA call), so a build with CUDA must say "no CUDA GPU
// is visible" naming what to check, and a build without (-DDTRAIN_WITH_CUDA=OFF) "dtrain was built without CUDA".

#include <doctest/doctest.h>

#include <cstdlib>
#include <stdexcept>

#include "trainer/kernels/cuda/factory.h"

namespace kernels = dtrain::trainer::kernels;

TEST_CASE("make_backend: cpu is the CPU backend, an unknown name is refused with the accepted ones") {
  CHECK(kernels::make_backend("cpu").name() == "cpu");
  CHECK(&kernels::make_backend("cpu", 3) == &kernels::make_backend("cpu"));
  CHECK_THROWS_WITH_AS(kernels::make_backend("tpu"), "unknown compute backend 'tpu': use cpu or cuda",
                       std::invalid_argument);
}

TEST_CASE("make_backend(\"cuda\") without a visible GPU says why and what to check") {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  if (kernels::built_with_cuda()) {
    CHECK_THROWS_WITH_AS(kernels::make_backend("cuda", 0), doctest::Contains("no CUDA GPU is visible ("),
                         kernels::BackendUnavailable);
    CHECK_THROWS_WITH_AS(kernels::make_backend("cuda", 0), doctest::Contains("CUDA_VISIBLE_DEVICES=''"),
                         kernels::BackendUnavailable);
    CHECK_THROWS_WITH_AS(kernels::make_backend("cuda", 0), doctest::Contains("check that nvidia-smi lists a GPU"),
                         kernels::BackendUnavailable);
  } else {
    CHECK_THROWS_WITH_AS(kernels::make_backend("cuda", 0), doctest::Contains("dtrain was built without CUDA ("),
                         kernels::BackendUnavailable);
  }
}
