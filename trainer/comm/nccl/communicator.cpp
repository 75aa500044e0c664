#include "trainer/comm/nccl/communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <initializer_list>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "trainer/comm/describe.h"
#include "trainer/comm/nccl/runtime.h"

namespace dtrain::trainer {
namespace {

using nccl_runtime::cuda_text;
using nccl_runtime::nccl_text;
using nccl_runtime::rt;

using Clock = std::chrono::steady_clock;

std::atomic<int> communicators_created{0};

}  // namespace

int cuda_device_count(std::string* why) {
  if (nccl_runtime::load(why) == nullptr) return 0;
  int count = 0;
  const cudaError_t error = rt().cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    rt().cudaGetLastError();  // clears it, so later CUDA calls do not report it again
    if (why != nullptr) *why = cuda_text(error);
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount found 0 devices";
  return count;
}

// Shared by the communicator and its Work handles, so a handle outlives neither the stream nor the comm.
struct NcclCommunicator::State {
  NcclCommOptions options;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
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
  void copy(float* to, const float* from, std::size_t count, cudaMemcpyKind kind) const {
    if (count == 0) return;
    use_device();
    cudaError_t error = rt().cudaMemcpyAsync(to, from, count * sizeof(float), kind, stream);
    if (error == cudaSuccess) error = rt().cudaStreamSynchronize(stream);
    if (error != cudaSuccess) {
      throw CommError("nccl (" + where() + "): copy of " + describe_floats(count) +
                      (kind == cudaMemcpyHostToDevice ? " to" : " from") + " the GPU failed: " + cuda_text(error));
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

namespace {

using State = NcclCommunicator::State;

// One enqueued collective: CUDA events before and after it on the communicator's stream.
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<State> state, std::string what, cudaEvent_t start, cudaEvent_t end)
      : state_(std::move(state)), what_(std::move(what)), start_(start), end_(end) {}
  ~NcclWork() override {
    rt().cudaEventDestroy(start_);
    rt().cudaEventDestroy(end_);
  }

  void wait() override {
    std::lock_guard<std::mutex> lock(wait_mutex_);
    if (finished_) {
      if (!failure_.empty()) throw CommError(failure_);
      return;
    }
    try {
      poll_until_done();
      finished_ = true;
    } catch (const CommError& error) {
      finished_ = true;
      failure_ = error.what();
      throw;
    }
  }

  bool done() const override {
    const cudaError_t status = rt().cudaEventQuery(end_);
    if (status == cudaErrorNotReady) {
      std::lock_guard<std::mutex> lock(state_->mutex);
      return state_->broken;
    }
    return true;
  }

  double elapsed_ms() const override { return elapsed_ms_; }

 private:
  std::string failed(const std::string& why) const {
    return "nccl " + what_ + " failed on " + state_->where() + ": " + why;
  }

  void poll_until_done() {
    state_->use_device();
    const auto started = Clock::now();
    const auto deadline = started + state_->options.timeout;
    const auto spin_until = started + std::chrono::milliseconds(20);
    for (;;) {
      const cudaError_t status = rt().cudaEventQuery(end_);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) {
        const std::string why = failed("CUDA reports " + cuda_text(status));
        const std::string first = state_->abort(why);
        throw CommError(first == why ? why : why + " (the communicator had already failed: " + first + ")");
      }
      {
        std::unique_lock<std::mutex> lock(state_->mutex);
        if (state_->broken) {
          throw CommError(failed("the communicator was aborted: " + state_->first_failure));
        }
        ncclResult_t async = ncclSuccess;
        const ncclResult_t result = rt().ncclCommGetAsyncError(state_->comm, &async);
        if (result != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
          const ncclResult_t error = result != ncclSuccess ? result : async;
          const std::string why = failed("NCCL reports " + nccl_text(error, state_->comm) +
                                         ". Check the other ranks' logs (a peer that exited or failed breaks the "
                                         "collective for every rank)");
          lock.unlock();
          throw CommError(state_->abort(why));
        }
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        const std::string why = failed("not finished after the timeout of " +
                                       describe_seconds(state_->options.timeout) +
                                       "; the communicator was aborted. A peer stopped answering, or the ranks "
                                       "issued different collectives or sizes: check the other ranks' logs");
        throw CommError(state_->abort(why));
      }
      if (now < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    float ms = 0;
    if (rt().cudaEventElapsedTime(&ms, start_, end_) == cudaSuccess) elapsed_ms_ = ms;
  }

  std::shared_ptr<State> state_;
  std::string what_;
  cudaEvent_t start_;
  cudaEvent_t end_;
  std::mutex wait_mutex_;
  bool finished_ = false;
  std::string failure_;
  double elapsed_ms_ = 0;
};

// Enqueues `launch` (NCCL calls on state.comm / state.stream) between two events and returns its Work; with
// `count` 0 only the events are recorded: NCCL is not called for an empty collective.
template <typename Launch>
std::shared_ptr<Work> enqueue(const std::shared_ptr<State>& state, const std::string& what, std::size_t count,
                              Launch launch) {
  state->check_usable(what);
  state->use_device();
  cudaEvent_t start = nullptr, end = nullptr;
  cudaError_t error = rt().cudaEventCreate(&start);
  if (error == cudaSuccess) error = rt().cudaEventCreate(&end);
  if (error == cudaSuccess) error = rt().cudaEventRecord(start, state->stream);
  if (error != cudaSuccess) {
    if (start != nullptr) rt().cudaEventDestroy(start);
    if (end != nullptr) rt().cudaEventDestroy(end);
    throw CommError("nccl " + what + " on " + state->where() + ": CUDA event setup failed: " + cuda_text(error));
  }
  auto work = std::make_shared<NcclWork>(state, what, start, end);
  const ncclResult_t result = count == 0 ? ncclSuccess : launch();
  if (result != ncclSuccess && result != ncclInProgress) {
    const std::string why = "nccl " + what + " failed on " + state->where() + ": " + nccl_text(result, state->comm);
    // An invalid argument leaves the communicator usable; anything else may have left the ranks out of step.
    if (result == ncclInvalidArgument || result == ncclInvalidUsage) throw CommError(why);
    throw CommError(state->abort(why));
  }
  error = rt().cudaEventRecord(end, state->stream);
  if (error != cudaSuccess) {
    const std::string why = "nccl " + what + " on " + state->where() + ": cudaEventRecord failed: " + cuda_text(error);
    throw CommError(state->abort(why));
  }
  return work;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<store::StoreClient> store, NcclCommOptions options)
    : state_(std::make_shared<State>()) {
  state_->options = options;
  const std::string who = "nccl communicator (" + state_->where() + ")";
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw CommError(who + ": rank must be in [0, size) and size at least 1");
  }
  std::string why;
  const int devices = cuda_device_count(&why);
  if (devices == 0) {
    throw CommError(who + ": no CUDA GPU is visible to this process (" + why +
                    "). The nccl backend needs one GPU per rank: run on a GPU node, check the driver (nvidia-smi) "
                    "and CUDA_VISIBLE_DEVICES, or use the gloo backend on CPU");
  }
  if (options.device < 0 || options.device >= devices) {
    throw CommError(who + ": GPU " + std::to_string(options.device) + " (LOCAL_RANK) does not exist; this process " +
                    "sees " + std::to_string(devices) + " GPU(s). Start at most as many ranks per node as it " +
                    "has GPUs (dtrain run --nproc-per-node), and check CUDA_VISIBLE_DEVICES");
  }
  const std::string id_bytes =
      exchange_nccl_unique_id(store.get(), options.key, options.rank, options.size, options.timeout);
  ncclUniqueId id;
  std::copy(id_bytes.begin(), id_bytes.end(), id.internal);

  state_->use_device();
  cudaError_t error = rt().cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking);
  if (error != cudaSuccess) {
    throw CommError(who + ": cudaStreamCreate failed: " + cuda_text(error));
  }
  const ncclResult_t result = rt().ncclCommInitRank(&state_->comm, options.size, id, options.rank);
  if (result != ncclSuccess) {
    rt().cudaStreamDestroy(state_->stream);
    state_->stream = nullptr;
    state_->comm = nullptr;
    throw CommError(who + ": ncclCommInitRank failed: " + nccl_text(result) +
                    ". Every rank must join with the same id (store key '" + options.key +
                    "'); set NCCL_DEBUG=INFO for NCCL's own account");
  }
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::from_env(int rank, int size, int device,
                                                             const CommOptions& options) {
  std::shared_ptr<store::StoreClient> store;
  if (size > 1) {
    try {
      store = std::make_shared<store::StoreClient>(store::StoreClient::from_env(
          {std::min(options.timeout, std::chrono::milliseconds(30'000)), options.timeout}));
    } catch (const store::StoreError& error) {
      throw CommError("nccl communicator (rank " + std::to_string(rank) + ") cannot reach the job's store: " +
                      error.what());
    }
  }
  NcclCommOptions nccl;
  nccl.rank = rank;
  nccl.size = size;
  nccl.device = device;
  nccl.key = "nccl/" + std::to_string(communicators_created.fetch_add(1));
  nccl.timeout = options.timeout;
  return std::make_unique<NcclCommunicator>(std::move(store), nccl);
}

NcclCommunicator::~NcclCommunicator() {
  if (!state_) return;
  bool healthy = false;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    healthy = !state_->broken && state_->comm != nullptr;
  }
  if (healthy && rt().cudaSetDevice(state_->options.device) == cudaSuccess) {
    // Let the collectives already issued finish, bounded by the timeout, as a Work::wait would.
    cudaEvent_t last = nullptr;
    if (rt().cudaEventCreateWithFlags(&last, cudaEventDisableTiming) == cudaSuccess &&
        rt().cudaEventRecord(last, state_->stream) == cudaSuccess) {
      const auto deadline = Clock::now() + state_->options.timeout;
      for (;;) {
        const cudaError_t status = rt().cudaEventQuery(last);
        if (status == cudaSuccess) break;
        ncclResult_t async = ncclSuccess;
        rt().ncclCommGetAsyncError(state_->comm, &async);
        if (status != cudaErrorNotReady || (async != ncclSuccess && async != ncclInProgress) ||
            Clock::now() >= deadline) {
          healthy = false;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    } else {
      healthy = false;
    }
    if (last != nullptr) rt().cudaEventDestroy(last);
  }
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->comm != nullptr) {
      if (healthy) {
        rt().ncclCommDestroy(state_->comm);
      } else {
        rt().ncclCommAbort(state_->comm);
      }
      state_->comm = nullptr;
      state_->broken = true;
      if (state_->first_failure.empty()) state_->first_failure = "the communicator was destroyed";
    }
  }
  if (state_->stream != nullptr) {
    rt().cudaStreamDestroy(state_->stream);
    state_->stream = nullptr;
  }
}

int NcclCommunicator::rank() const { return state_->options.rank; }
int NcclCommunicator::size() const { return state_->options.size; }
int NcclCommunicator::device() const { return state_->options.device; }

float* NcclCommunicator::allocate(std::size_t count) {
  if (count == 0) return nullptr;
  state_->use_device();
  void* data = nullptr;
  const cudaError_t error = rt().cudaMalloc(&data, count * sizeof(float));
  if (error != cudaSuccess) {
    rt().cudaGetLastError();
    throw CommError("nccl (" + state_->where() + "): cudaMalloc of " + describe_floats(count) + " failed: " +
                    cuda_text(error));
  }
  return static_cast<float*>(data);
}

void NcclCommunicator::release(float* data) {
  if (data == nullptr) return;
  state_->use_device();
  rt().cudaFree(data);
}

void NcclCommunicator::copy_in(float* buffer, const float* host, std::size_t count) {
  state_->copy(buffer, host, count, cudaMemcpyHostToDevice);
}

void NcclCommunicator::copy_out(float* host, const float* buffer, std::size_t count) {
  state_->copy(host, buffer, count, cudaMemcpyDeviceToHost);
}

std::shared_ptr<Work> NcclCommunicator::allreduce(float* data, std::size_t count) {
  const std::string what = "allreduce of " + describe_floats(count);
  state_->check_device_pointers(what, count, {{data, "data"}});
  return enqueue(state_, what, count, [&] {
    return rt().ncclAllReduce(data, data, count, ncclFloat32, ncclSum, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter(const float* in, float* out, std::size_t count_per_rank) {
  const std::string what = "reduce_scatter of " + describe_floats(count_per_rank) + " per rank";
  state_->check_device_pointers(what, count_per_rank, {{in, "in"}, {out, "out"}});
  return enqueue(state_, what, count_per_rank, [&] {
    return rt().ncclReduceScatter(in, out, count_per_rank, ncclFloat32, ncclSum, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::all_gather(const float* in, float* out, std::size_t count_per_rank) {
  const std::string what = "all_gather of " + describe_floats(count_per_rank) + " per rank";
  state_->check_device_pointers(what, count_per_rank, {{in, "in"}, {out, "out"}});
  return enqueue(state_, what, count_per_rank, [&] {
    return rt().ncclAllGather(in, out, count_per_rank, ncclFloat32, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::broadcast(float* data, std::size_t count, int root) {
  const std::string what = "broadcast of " + describe_floats(count) + " from rank " + std::to_string(root);
  if (root < 0 || root >= state_->options.size) {
    throw CommError("nccl " + what + " on " + state_->where() + ": root must be in [0, " +
                    std::to_string(state_->options.size) + ")");
  }
  state_->check_device_pointers(what, count, {{data, "data"}});
  return enqueue(state_, what, count, [&] {
    return rt().ncclBroadcast(data, data, count, ncclFloat32, root, state_->comm, state_->stream);
  });
}

}  // namespace dtrain::trainer
