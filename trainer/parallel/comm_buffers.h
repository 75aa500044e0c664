#pragma once

// The trainer's buffers in the communicator's memory (Communicator::allocate). With the shm backend (and hier, whose
// node communicator is shm) such a buffer lives in this rank's part of the node's shared segment, so a collective on
// it reads and writes it where it is instead of copying it in and out of the segment's staging slots: that copy
// costs about as much memory traffic as the reduction itself. The model's parameters, gradients and 16-bit working
// copy and the reducers' 16-bit copies (trainer/model/buffers.h) come from here when the model computes on host
// memory; a GPU backend keeps its device memory (collective_buffers below).
//
// FALLBACK: /dev/shm is often small (containers get 64 MiB unless told otherwise), so when the communicator has no
// room for a buffer (a CommError from allocate) the buffer comes from ordinary memory instead (HeapBuffers) and
// training goes on, its collectives on that buffer going through the staging slots. `notice` hears of it once, with
// what was not placed, why and how to give /dev/shm more room.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"
#include "trainer/model/buffers.h"

namespace dtrain::trainer {

class CommBuffers final : public BufferSource {
 public:
  // comm must keep host buffers (device_buffers() == false) and outlive every buffer handed out (std::logic_error
  // otherwise). notice: called once, on the first fallback; may be empty.
  CommBuffers(Communicator& comm, std::function<void(const std::string&)> notice);

  float* allocate(std::size_t count, const char* what) override;
  void release(float* data) override;

  // Bytes handed out and not released: by the communicator, and by the fallback.
  std::size_t communicator_bytes() const { return communicator_bytes_; }
  std::size_t fallback_bytes() const { return fallback_bytes_; }

 private:
  Communicator& comm_;
  std::function<void(const std::string&)> notice_;
  bool noticed_ = false;
  HeapBuffers heap_;
  std::size_t communicator_bytes_ = 0;
  std::size_t fallback_bytes_ = 0;
  std::unordered_map<const float*, std::size_t> sizes_;  // buffer -> bytes, for the counts above
};

// Where a model trained with `comm` on `backend` keeps its buffers: the communicator's memory (CommBuffers) when both
// work on host memory (a cpu backend and a communicator without device buffers), else the backend's own (a GPU
// backend allocates on its device, and NCCL takes those pointers as they are). `notice` as CommBuffers'.
std::unique_ptr<BufferSource> collective_buffers(Communicator& comm, kernels::Backend& backend,
                                                 std::function<void(const std::string&)> notice);

}  // namespace dtrain::trainer
