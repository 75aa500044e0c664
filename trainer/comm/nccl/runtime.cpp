#include "trainer/comm/nccl/runtime.h"

#include <dlfcn.h>

#include <initializer_list>
#include <mutex>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer::nccl_runtime {
namespace {

void* open_first(std::initializer_list<const char*> names, std::string& tried) {
  for (const char* name : names) {
    if (void* handle = ::dlopen(name, RTLD_NOW | RTLD_GLOBAL)) return handle;
    const char* error = ::dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (error != nullptr ? error : name);
  }
  return nullptr;
}

struct Loaded {
  Api api;
  std::string error;  // "" when every function was found
};

Loaded load_once() {
  Loaded out;
  std::string tried;
  void* cudart = open_first({"libcudart.so.13", "libcudart.so", "/usr/local/cuda/lib64/libcudart.so.13",
                             "/usr/local/cuda/lib64/libcudart.so"},
                            tried);
  if (cudart == nullptr) {
    out.error = "the CUDA runtime (libcudart) is not installed on this node (" + tried +
                "): install CUDA 13's runtime, or use the gloo backend on CPU";
    return out;
  }
  tried.clear();
  void* nccl = open_first({"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2"}, tried);
  if (nccl == nullptr) {
    out.error = "NCCL (libnccl.so.2) is not installed on this node (" + tried +
                "): install NCCL 2, or use the gloo backend on CPU";
    return out;
  }
#define DTRAIN_LOAD(handle, name)                                                                   \
  out.api.name = reinterpret_cast<decltype(out.api.name)>(::dlsym(handle, #name));                 \
  if (out.api.name == nullptr && out.error.empty()) out.error = std::string(#name " is missing from ") + \
                                                                (handle == cudart ? "libcudart" : "libnccl") + \
                                                                ": the installed version is too old";
#define DTRAIN_LOAD_CUDA(name) DTRAIN_LOAD(cudart, name)
#define DTRAIN_LOAD_NCCL(name) DTRAIN_LOAD(nccl, name)
#define DTRAIN_LOAD_TYPED(name, type) DTRAIN_LOAD(cudart, name)
  DTRAIN_CUDA_FUNCTIONS(DTRAIN_LOAD_CUDA)
  DTRAIN_CUDA_OVERLOADED(DTRAIN_LOAD_TYPED)
  DTRAIN_NCCL_FUNCTIONS(DTRAIN_LOAD_NCCL)
#undef DTRAIN_LOAD_TYPED
#undef DTRAIN_LOAD_NCCL
#undef DTRAIN_LOAD_CUDA
#undef DTRAIN_LOAD
  return out;
}

}  // namespace

const Api* load(std::string* why) {
  static const Loaded loaded = load_once();
  if (!loaded.error.empty()) {
    if (why != nullptr) *why = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

const Api& rt() {
  std::string why;
  const Api* api = load(&why);
  if (api == nullptr) throw CommError("nccl backend: " + why);
  return *api;
}

std::string cuda_text(cudaError_t error) {
  return std::string(rt().cudaGetErrorName(error)) + ": " + rt().cudaGetErrorString(error);
}

std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = rt().ncclGetErrorString(result);
  const char* last = rt().ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  return text;
}

}  // namespace dtrain::trainer::nccl_runtime
