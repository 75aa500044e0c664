#pragma once

// NCCL and the CUDA runtime, loaded with dlopen on first use rather than linked, so that one dtrain binary starts on
// nodes without them (CPU nodes, login nodes), as NVML is loaded for `dtrain topo`. Their types come from the
// headers at build time; nothing of either is linked. Libraries tried, in order: libcudart.so.13, libcudart.so
// (and the same under /usr/local/cuda/lib64), then libnccl.so.2, libnccl.so.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace dtrain::trainer::nccl_runtime {

#define DTRAIN_CUDA_FUNCTIONS(X)                                                                                     \
  X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetErrorName) X(cudaGetErrorString) X(cudaGetLastError)             \
  X(cudaFree) X(cudaMemcpyAsync) X(cudaPointerGetAttributes) X(cudaStreamCreateWithFlags)            \
  X(cudaStreamDestroy) X(cudaStreamSynchronize) X(cudaEventCreateWithFlags) X(cudaEventDestroy)                  \
  X(cudaEventRecord) X(cudaEventQuery) X(cudaEventElapsedTime) X(cudaStreamWaitEvent)
#define DTRAIN_NCCL_FUNCTIONS(X)                                                                                     \
  X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommFinalize) X(ncclCommDestroy)         \
  X(ncclCommAbort) X(ncclCommGetAsyncError)                                                                      \
  X(ncclGetErrorString) X(ncclGetLastError) X(ncclAllReduce) X(ncclAllGather) X(ncclReduceScatter) X(ncclBroadcast)

// nccl.h includes cuda_runtime.h, whose C++ overloads of these two make decltype(&name) ambiguous: the C
// signatures are spelled out.
using CudaMallocFn = cudaError_t (*)(void**, size_t);
using CudaEventCreateFn = cudaError_t (*)(cudaEvent_t*);
#define DTRAIN_CUDA_OVERLOADED(X) X(cudaMalloc, CudaMallocFn) X(cudaEventCreate, CudaEventCreateFn)

struct Api {
#define DTRAIN_MEMBER(name) decltype(&::name) name = nullptr;
#define DTRAIN_TYPED_MEMBER(name, type) type name = nullptr;
  DTRAIN_CUDA_FUNCTIONS(DTRAIN_MEMBER)
  DTRAIN_CUDA_OVERLOADED(DTRAIN_TYPED_MEMBER)
  DTRAIN_NCCL_FUNCTIONS(DTRAIN_MEMBER)
#undef DTRAIN_TYPED_MEMBER
#undef DTRAIN_MEMBER
};

// The loaded functions (loaded once, thread-safe), or nullptr with *why naming the library or symbol that is
// missing and what to install.
const Api* load(std::string* why = nullptr);

// The loaded functions for a caller that cannot go on without them: a node without CUDA or NCCL gets a CommError
// "nccl backend: <what load() says>".
const Api& rt();

// "cudaErrorInvalidValue: invalid argument": CUDA's name and text for `error`.
std::string cuda_text(cudaError_t error);
// NCCL's text for `result`, with NCCL's last error message for `comm` when it has one.
std::string nccl_text(ncclResult_t result, ncclComm_t comm = nullptr);

}  // namespace dtrain::trainer::nccl_runtime
