#include "trainer/comm/nccl/work.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "trainer/comm/describe.h"
#include "trainer/comm/nccl/runtime.h"
#include "trainer/common/host_wait.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;
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
    if (!finished_) note_host_wait(what_.c_str());
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

  // The compute stream waits for the end event on the GPU; wait() later polls it (the timeout and NCCL's errors).
  void order_before(void* stream) override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->broken) throw CommError(failed("the communicator was aborted: " + state_->first_failure));
    }
    state_->use_device();
    const cudaError_t error = rt().cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), end_, 0);
    if (error != cudaSuccess) {
      throw CommError(state_->abort(failed("ordering the compute stream after it failed: " + cuda_text(error))));
    }
  }

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

// The communicator is non-blocking (start.h), so a collective may return ncclInProgress before it is on the stream:
// NCCL then enqueues it from a thread of its own, after connecting to the peers on the communicator's first
// collectives. Until the communicator's state leaves ncclInProgress nothing may go on the stream behind it (the end
// event would complete ahead of the collective) and NCCL refuses the next call ("Attempt to use communicator before
// the previous operation returned ncclSuccess"). Polls that state up to the timeout and returns it (ncclSuccess once
// the collective is enqueued); at the deadline, aborts the communicator and throws.
ncclResult_t wait_until_enqueued(State& state, const std::string& what) {
  const auto started = Clock::now();
  const auto deadline = started + state.options.timeout;
  const auto spin_until = started + std::chrono::milliseconds(2);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      if (state.broken) {
        throw CommError("nccl " + what + " on " + state.where() + " not enqueued: the communicator was aborted: " +
                        state.first_failure);
      }
      ncclResult_t async = ncclInProgress;
      const ncclResult_t query = rt().ncclCommGetAsyncError(state.comm, &async);
      if (query != ncclSuccess) return query;
      if (async != ncclInProgress) return async;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      throw CommError(state.abort(
          "nccl " + what + " failed on " + state.where() + ": NCCL had not enqueued it after the timeout of " +
          describe_seconds(state.options.timeout) + " (it connects to the peers on the first collectives, and every "
          "rank must issue the same ones); the communicator was aborted. A peer that stopped or never issued this "
          "collective: check the other ranks' logs"));
    }
    if (now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

std::shared_ptr<Work> enqueue(const std::shared_ptr<State>& state, const std::string& what, std::size_t count,
                              const std::function<ncclResult_t()>& launch) {
  state->check_usable(what);
  state->use_device();
  state->wait_for_producer(what);
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
  ncclResult_t result = count == 0 ? ncclSuccess : launch();
  if (result == ncclInProgress) result = wait_until_enqueued(*state, what);
  if (result != ncclSuccess) {
    // Even an invalid argument breaks a non-blocking communicator: NCCL keeps the error as the communicator's state
    // and refuses every later call with it. The arguments it could refuse are checked before (device pointers, root).
    throw CommError(state->abort("nccl " + what + " failed on " + state->where() + ": NCCL reports " +
                                 nccl_text(result, state->comm) + ". Check the other ranks' logs (a peer that "
                                 "exited or failed breaks the collective for every rank)"));
  }
  error = rt().cudaEventRecord(end, state->stream);
  if (error != cudaSuccess) {
    const std::string why = "nccl " + what + " on " + state->where() + ": cudaEventRecord failed: " + cuda_text(error);
    throw CommError(state->abort(why));
  }
  return work;
}

}  // namespace dtrain::trainer
