#include "trainer/kernels/cuda/blaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "trainer/kernels/cuda/error.h"

namespace dtrain::trainer::kernels::cuda {
namespace {

// Hopper's cuBLAS kernels ask for up to 32 MiB of workspace (the size NVIDIA's cuBLAS documentation recommends for
// sm_90); less makes the heuristic fall back to slower algorithms.
constexpr std::size_t kWorkspaceBytes = 32u << 20;

#define DTRAIN_BLASLT_FUNCTIONS(X)                                                                                   \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate)                      \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                     \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)              \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

struct Api {
#define DTRAIN_MEMBER(name) decltype(&::name) name = nullptr;
  DTRAIN_BLASLT_FUNCTIONS(DTRAIN_MEMBER)
#undef DTRAIN_MEMBER
};

// The loaded functions; throws naming what was tried and the fix (a start-up error: the backend cannot be made).
const Api& api() {
  static const Api loaded = [] {
    std::string tried;
    void* lib = nullptr;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13"}) {
      if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
      const char* error = ::dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (error != nullptr ? error : name);
    }
    if (lib == nullptr) {
      throw std::runtime_error("cuda backend: cuBLASLt (libcublasLt.so.13) is not installed on this node (" + tried +
                               "): install CUDA 13's cuBLAS, or add its directory to LD_LIBRARY_PATH");
    }
    Api out;
#define DTRAIN_LOAD(name)                                                                                   \
  out.name = reinterpret_cast<decltype(out.name)>(::dlsym(lib, #name));                                    \
  if (out.name == nullptr) throw std::runtime_error("cuda backend: " #name " is missing from libcublasLt: " \
                                                    "the installed cuBLAS is older than CUDA 13's");
    DTRAIN_BLASLT_FUNCTIONS(DTRAIN_LOAD)
#undef DTRAIN_LOAD
    return out;
  }();
  return loaded;
}

void check_lt(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error("cuda backend: " + what + ": " + api().cublasLtGetStatusString(status));
}

cudaDataType_t data_type(GemmInput input) {
  switch (input) {
    case GemmInput::fp32: return CUDA_R_32F;
    case GemmInput::bf16: return CUDA_R_16BF;
    case GemmInput::fp16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

// The largest power of two up to 256 that divides the address: what the heuristic may assume of a pointer that
// the model carved out of a flat buffer at any float offset.
std::uint32_t alignment(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

std::string shape(const GemmArgs& a) {
  return "gemm M=" + std::to_string(a.M) + " N=" + std::to_string(a.N) + " K=" + std::to_string(a.K) +
         (a.trans_a ? " A^T" : "") + (a.trans_b ? " B^T" : "") + " lda=" + std::to_string(a.lda) +
         " ldb=" + std::to_string(a.ldb) + " ldc=" + std::to_string(a.ldc);
}

// The descriptors of one call, destroyed when it returns (whatever throws).
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~Descriptors() {
    if (preference != nullptr) api().cublasLtMatmulPreferenceDestroy(preference);
    if (c != nullptr) api().cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) api().cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) api().cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) api().cublasLtMatmulDescDestroy(op);
  }
};

void set_op(const Api& lt, Descriptors& d, const GemmArgs& args, const std::string& what) {
  check_lt(lt.cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
  // Column-major cuBLASLt sees the row-major C^T = op(B)^T op(A)^T: its A is our B and its B our A.
  const cublasOperation_t op_a = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), what);
  check_lt(lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), what);
  if (args.bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_32F;
    check_lt(lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
             what);
    check_lt(lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias,
                                               sizeof(args.bias)),
             what);
    check_lt(lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                               sizeof(bias_type)),
             what);
  }
}

void set_layouts(const Api& lt, Descriptors& d, const GemmArgs& args, const std::string& what) {
  const cudaDataType_t in = data_type(args.input);
  // Stored (rows x cols) of each column-major view: our row-major X with row stride ld is X^T with leading dim ld.
  check_lt(lt.cublasLtMatrixLayoutCreate(&d.a, in, args.trans_b ? args.K : args.N, args.trans_b ? args.N : args.K,
                                         args.ldb),
           what);
  check_lt(lt.cublasLtMatrixLayoutCreate(&d.b, in, args.trans_a ? args.M : args.K, args.trans_a ? args.K : args.M,
                                         args.lda),
           what);
  check_lt(lt.cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, args.N, args.M, args.ldc), what);
}

}  // namespace

BlasLt::BlasLt(cudaStream_t stream) : stream_(stream) {
  cublasLtHandle_t handle = nullptr;
  check_lt(api().cublasLtCreate(&handle), "cublasLtCreate");
  handle_ = handle;
  check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc of the cuBLASLt workspace");
}

BlasLt::~BlasLt() {
  // Errors are ignored: at exit the driver may already be shutting down, and a destructor must not throw.
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) api().cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

bool BlasLt::try_gemm(const GemmArgs& args) {
  const Api& lt = api();
  const std::string what = shape(args);
  Descriptors d;
  set_op(lt, d, args, what);
  set_layouts(lt, d, args, what);
  check_lt(lt.cublasLtMatmulPreferenceCreate(&d.preference), what);
  const std::uint64_t workspace = kWorkspaceBytes;
  check_lt(lt.cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace, sizeof(workspace)),
           what);
  const std::uint32_t aligns[] = {alignment(args.B), alignment(args.A), alignment(args.C), alignment(args.C)};
  const cublasLtMatmulPreferenceAttributes_t align_attrs[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    check_lt(lt.cublasLtMatmulPreferenceSetAttribute(d.preference, align_attrs[i], &aligns[i], sizeof(aligns[i])),
             what);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = lt.cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), d.op, d.a,
                                                                  d.b, d.c, d.c, d.preference, 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  check_lt(status, what);
  check_lt(lt.cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), d.op, &args.alpha, args.B, d.a, args.A, d.b,
                             &args.beta, args.C, d.c, args.C, d.c, &result.algo, workspace_, kWorkspaceBytes,
                             stream_),
           what);
  return true;
}

void BlasLt::gemm(const GemmArgs& args) {
  if (!try_gemm(args)) throw std::runtime_error("cuda backend: cuBLASLt has no algorithm for " + shape(args));
}

}  // namespace dtrain::trainer::kernels::cuda
