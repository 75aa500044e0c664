#pragma once

// Matrix products through cuBLASLt, loaded with dlopen on first use (as nccl/runtime.h loads libcudart and NCCL):
// libcublasLt is half a gigabyte, is not needed to start dtrain-trainer, and a GPU machine has it with its CUDA
// installation. Libraries tried, in order: libcublasLt.so.13, libcublasLt.so, /usr/local/cuda/lib64/libcublasLt.so.13.
//
// Precision: CUBLAS_COMPUTE_32F for every product, so fp32 inputs multiply in full fp32 (TF32 is never allowed;
// it would be CUBLAS_COMPUTE_32F_FAST_TF32) and bf16/fp16 inputs accumulate in fp32 on tensor cores.

#include <cuda_runtime_api.h>


namespace dtrain::trainer::kernels::cuda {

// The element type of a product's A and B (C, the bias and the scalars are always fp32).
enum class GemmInput { fp32, bf16, fp16 };

// One row-major product, as cblas_sgemm: C (M, N) = alpha op(A) op(B) + beta C [+ bias (N) on every row], where
// op(A) is (M, K) and op(B) is (K, N), lda/ldb/ldc the row strides of the stored matrices.
struct GemmArgs {
  GemmInput input = GemmInput::fp32;
  bool trans_a = false;
  bool trans_b = false;
  int M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  const void* A = nullptr;
  int lda = 0;
  const void* B = nullptr;
  int ldb = 0;
  float beta = 0.0f;
  float* C = nullptr;
  int ldc = 0;
  const float* bias = nullptr;  // null: none; else added after alpha op(A) op(B) + beta C
};

// A cuBLASLt handle and workspace for one stream. Not thread-safe (one per backend, used from its thread).
class BlasLt {
 public:
  // Throws std::runtime_error naming the library and the fix when cuBLASLt cannot be loaded.
  explicit BlasLt(cudaStream_t stream);
  ~BlasLt();
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;

  // Enqueues the product on the stream; throws std::runtime_error naming the shape when cuBLASLt has no algorithm
  // for it or the call fails.
  void gemm(const GemmArgs& args);
  // The same, but returns false (enqueuing nothing) when cuBLASLt has no algorithm for it, so that the caller can
  // do it another way (the bias epilogue may not exist for every type and layout).
  bool try_gemm(const GemmArgs& args);

 private:
  cudaStream_t stream_;
  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device memory, kWorkspaceBytes
};

}  // namespace dtrain::trainer::kernels::cuda
