#pragma once

// The NCCL communicator's state, shared by the communicator and the Work handles of its collectives so that a
// handle outlives neither the stream nor the NCCL communicator: the two, the options, and whether (and why) it was
// aborted. Internal to the nccl backend.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <initializer_list>
#include <mutex>
#include <string>
#include <utility>

#include "trainer/comm/describe.h"
#include "trainer/comm/nccl/communicator.h"
#include "trainer/comm/nccl/runtime.h"
#include "trainer/common/host_wait.h"

namespace dtrain::trainer {

// The nccl backend's files call the loaded runtime by these short names.
using nccl_runtime::cuda_text;
using nccl_runtime::nccl_text;
using nccl_runtime::rt;

struct NcclCommunicator::State {
  NcclCommOptions options;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  // order_after(): the compute stream each collective waits for, and the event that carries the wait (one event
  // serves every collective: cudaStreamWaitEvent takes the event's state when it is called).
  cudaStream_t producer = nullptr;
  cudaEvent_t producer_done = nullptr;
  std::mutex mutex;           // guards broken, first_failure and the abort
  bool broken = false;        // aborted: no collective can run on comm any more
  std::string first_failure;  // why it broke

  std::string where() const {
    return "rank " + std::to_string(options.rank) + " of " + std::to_string(options.size) + ", GPU " +
           std::to_string(options.device);
  }

  // Makes this communicator's GPU current on the calling thread (each thread has its own current device).
  void use_device() const {
    const cudaError_t error = rt().cudaSetDevice(options.device);
    if (error != cudaSuccess) {
      throw CommError("nccl (" + where() + "): cudaSetDevice failed: " + cuda_text(error));
    }
  }

  // Copies `count` floats between host and this GPU on the communicator's stream (which does not synchronise with
  // the default stream), then waits for it: the copy lands after the collectives issued before and before any
  // issued after, and is complete on return.
  void copy(float* to, const float* from, std::size_t count, cudaMemcpyKind kind) {
    if (count == 0) return;
    use_device();
    note_host_wait(kind == cudaMemcpyHostToDevice ? "copy to the device" : "copy to the host");
    wait_for_producer("copy");
    cudaError_t error = rt().cudaMemcpyAsync(to, from, count * sizeof(float), kind, stream);
    if (error == cudaSuccess) error = rt().cudaStreamSynchronize(stream);
    if (error != cudaSuccess) {
      throw CommError("nccl (" + where() + "): copy of " + describe_floats(count) +
                      (kind == cudaMemcpyHostToDevice ? " to" : " from") + " the GPU failed: " + cuda_text(error));
    }
  }

  // With a producer stream (order_after), makes the communicator's stream wait, on the GPU, for the work enqueued on
  // it so far: the collective about to be issued then reads what that work wrote. The host does not wait.
  void wait_for_producer(const std::string& what) {
    if (producer == nullptr) return;
    cudaError_t error = cudaSuccess;
    if (producer_done == nullptr) error = rt().cudaEventCreateWithFlags(&producer_done, cudaEventDisableTiming);
    if (error == cudaSuccess) error = rt().cudaEventRecord(producer_done, producer);
    if (error == cudaSuccess) error = rt().cudaStreamWaitEvent(stream, producer_done, 0);
    if (error != cudaSuccess) {
      throw CommError("nccl " + what + " on " + where() + ": ordering after the compute stream failed: " +
                      cuda_text(error));
    }
  }

  // Aborts the NCCL communicator once and remembers `failure` as the reason; returns the first reason.
  std::string abort(const std::string& failure) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken) {
      broken = true;
      first_failure = failure;
      if (comm != nullptr) rt().ncclCommAbort(comm);
      comm = nullptr;
    }
    return first_failure;
  }

  void check_usable(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (broken) {
      throw CommError("nccl " + what + " on " + where() + " not run: the communicator was aborted after an " +
                      "earlier failure: " + first_failure);
    }
  }

  // Each of a collective's buffers must be device memory on this communicator's GPU; an empty collective
  // (count 0) touches none, so its buffers are not checked.
  void check_device_pointers(const std::string& what, std::size_t count,
                             std::initializer_list<std::pair<const void*, const char*>> buffers) const {
    if (count == 0) return;
    for (const auto& [pointer, name] : buffers) check_device_pointer(pointer, name, what);
  }

  void check_device_pointer(const void* pointer, const char* name, const std::string& what) const {
    cudaPointerAttributes attributes{};
    const cudaError_t error = rt().cudaPointerGetAttributes(&attributes, pointer);
    if (error != cudaSuccess) {
      rt().cudaGetLastError();
      throw CommError("nccl " + what + " on " + where() + ": cannot inspect buffer '" + name +
                      "': " + cuda_text(error));
    }
    if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
      throw CommError("nccl " + what + " on " + where() + ": buffer '" + name +
                      "' is host memory; the nccl backend takes device pointers (cudaMalloc on GPU " +
                      std::to_string(options.device) + ", or Communicator::allocate)");
    }
    if (attributes.type == cudaMemoryTypeDevice && attributes.device != options.device) {
      throw CommError("nccl " + what + " on " + where() + ": buffer '" + name + "' lives on GPU " +
                      std::to_string(attributes.device) + ", not on this communicator's GPU " +
                      std::to_string(options.device));
    }
  }
};

}  // namespace dtrain::trainer
