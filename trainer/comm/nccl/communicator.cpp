#include "trainer/comm/nccl/communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "trainer/comm/describe.h"
#include "trainer/comm/job_store.h"
#include "trainer/comm/nccl/runtime.h"
#include "trainer/comm/nccl/start.h"
#include "trainer/comm/nccl/state.h"
#include "trainer/comm/nccl/work.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> nccl_communicators_created{0};

// NCCL's element type for a 16-bit `type` (bf16 needs NCCL >= 2.10).
ncclDataType_t nccl_half_type(kernels::Dtype type) {
  return type == kernels::Dtype::bf16 ? ncclBfloat16 : ncclFloat16;
}

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
  try {
    const NcclStart start{options.rank, options.size, options.key, options.timeout, who};
    state_->comm = start_nccl_comm(store.get(), start, id);
  } catch (...) {
    rt().cudaStreamDestroy(state_->stream);
    state_->stream = nullptr;
    state_->comm = nullptr;
    throw;
  }
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::from_env(int rank, int size, int device,
                                                             const CommOptions& options) {
  std::shared_ptr<store::StoreClient> store;
  if (size > 1) {
    try {
      store = std::make_shared<store::StoreClient>(job_store(options));
    } catch (const store::StoreError& error) {
      throw CommError("nccl communicator (rank " + std::to_string(rank) + ") cannot reach the job's store: " +
                      error.what());
    }
  }
  NcclCommOptions nccl;
  nccl.rank = rank;
  nccl.size = size;
  nccl.device = device;
  nccl.key = "nccl/" + std::to_string(nccl_communicators_created.fetch_add(1));
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
        finish_nccl_comm(state_->comm, state_->options.timeout);
      } else {
        rt().ncclCommAbort(state_->comm);
      }
      state_->comm = nullptr;
      state_->broken = true;
      if (state_->first_failure.empty()) state_->first_failure = "the communicator was destroyed";
    }
  }
  if (state_->producer_done != nullptr) rt().cudaEventDestroy(state_->producer_done);
  if (state_->stream != nullptr) {
    rt().cudaStreamDestroy(state_->stream);
    state_->stream = nullptr;
  }
}

void NcclCommunicator::order_after(void* stream) { state_->producer = static_cast<cudaStream_t>(stream); }

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
  note_host_wait("cudaFree");  // cudaFree waits for the whole device
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
  count_sent(ring_bytes_per_rank(Collective::allreduce, count * sizeof(float), size()));
  return enqueue(state_, what, count, [&] {
    return rt().ncclAllReduce(data, data, count, ncclFloat32, ncclSum, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type) {
  const std::string what =
      std::string("allreduce of ") + std::to_string(count) + " " + kernels::dtype_name(type) + " values";
  refuse_fp32(type, what + " on " + state_->where(), "allreduce");
  state_->check_device_pointers(what, count, {{data, "data"}});
  count_sent(ring_bytes_per_rank(Collective::allreduce, count * sizeof(std::uint16_t), size()));
  const ncclDataType_t nccl_type = nccl_half_type(type);
  return enqueue(state_, what, count, [&] {
    return rt().ncclAllReduce(data, data, count, nccl_type, ncclSum, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter(const float* in, float* out, std::size_t count_per_rank) {
  const std::string what = "reduce_scatter of " + describe_floats(count_per_rank) + " per rank";
  state_->check_device_pointers(what, count_per_rank, {{in, "in"}, {out, "out"}});
  count_sent(ring_bytes_per_rank(Collective::reduce_scatter, count_per_rank * size() * sizeof(float), size()));
  return enqueue(state_, what, count_per_rank, [&] {
    return rt().ncclReduceScatter(in, out, count_per_rank, ncclFloat32, ncclSum, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out,
                                                            std::size_t count_per_rank, kernels::Dtype type) {
  const std::string what = "reduce_scatter of " + std::to_string(count_per_rank) + " " + kernels::dtype_name(type) +
                           " values per rank";
  refuse_fp32(type, what + " on " + state_->where(), "reduce_scatter");
  state_->check_device_pointers(what, count_per_rank, {{in, "in"}, {out, "out"}});
  count_sent(ring_bytes_per_rank(Collective::reduce_scatter, count_per_rank * size() * sizeof(std::uint16_t),
                                 size()));
  const ncclDataType_t nccl_type = nccl_half_type(type);
  return enqueue(state_, what, count_per_rank, [&] {
    return rt().ncclReduceScatter(in, out, count_per_rank, nccl_type, ncclSum, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::all_gather(const float* in, float* out, std::size_t count_per_rank) {
  const std::string what = "all_gather of " + describe_floats(count_per_rank) + " per rank";
  state_->check_device_pointers(what, count_per_rank, {{in, "in"}, {out, "out"}});
  count_sent(ring_bytes_per_rank(Collective::all_gather, count_per_rank * size() * sizeof(float), size()));
  return enqueue(state_, what, count_per_rank, [&] {
    return rt().ncclAllGather(in, out, count_per_rank, ncclFloat32, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                                        std::size_t count_per_rank) {
  const std::string what = "all_gather of " + std::to_string(count_per_rank) + " 16-bit values per rank";
  state_->check_device_pointers(what, count_per_rank, {{in, "in"}, {out, "out"}});
  count_sent(ring_bytes_per_rank(Collective::all_gather, count_per_rank * size() * sizeof(std::uint16_t), size()));
  return enqueue(state_, what, count_per_rank, [&] {
    return rt().ncclAllGather(in, out, count_per_rank, ncclFloat16, state_->comm, state_->stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::broadcast(float* data, std::size_t count, int root) {
  const std::string what = "broadcast of " + describe_floats(count) + " from rank " + std::to_string(root);
  if (root < 0 || root >= state_->options.size) {
    throw CommError("nccl " + what + " on " + state_->where() + ": root must be in [0, " +
                    std::to_string(state_->options.size) + ")");
  }
  state_->check_device_pointers(what, count, {{data, "data"}});
  count_sent(ring_bytes_per_rank(Collective::broadcast, count * sizeof(float), size()));
  return enqueue(state_, what, count, [&] {
    return rt().ncclBroadcast(data, data, count, ncclFloat32, root, state_->comm, state_->stream);
  });
}

}  // namespace dtrain::trainer
