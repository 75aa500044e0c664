#pragma once

// Where the buffers that collectives read and write live: the model's flat parameter and gradient buffers and its
// 16-bit working copy (gpt.h), and the reducers' 16-bit gradient copies (trainer/parallel/ddp/reducer.h,
// trainer/parallel/zero/reducer.h). The model computes on them, so they must be memory its compute backend accepts;
// where exactly is the caller's choice:
//   BackendBuffers  the compute backend's memory (kernels/backend.h: host for cpu, device for a GPU backend); the
//                   model's default, and the only choice for a GPU backend;
//   HeapBuffers     ordinary host memory, as the cpu backend's: anonymous private mappings, zero-filled by the kernel
//                   and resident only where written, so ZeRO's releases (trainer/parallel/zero/pages.h) apply;
//   CommBuffers     (trainer/parallel/comm_buffers.h) the communicator's own memory: with the shm backend a buffer in
//                   the node's shared segment, on which collectives skip their staging copies.
// Every buffer reads as zeros when handed out.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "trainer/kernels/backend.h"

namespace dtrain::trainer {

class BufferSource {
 public:
  virtual ~BufferSource() = default;
  // Zero-filled room for `count` floats (nullptr for 0). `what` names the buffer in messages ("the gradient
  // buffer"). Throws when there is no memory for it.
  virtual float* allocate(std::size_t count, const char* what) = 0;
  // Frees a buffer from allocate(); nullptr is fine.
  virtual void release(float* data) = 0;

  // 16-bit buffers, two values per float.
  std::uint16_t* allocate_half(std::size_t count, const char* what) {
    return reinterpret_cast<std::uint16_t*>(allocate((count + 1) / 2, what));
  }
  void release_half(std::uint16_t* data) { release(reinterpret_cast<float*>(data)); }
};

class BackendBuffers final : public BufferSource {
 public:
  explicit BackendBuffers(kernels::Backend& backend) : backend_(backend) {}
  float* allocate(std::size_t count, const char*) override { return backend_.allocate(count); }
  void release(float* data) override { backend_.release(data); }

 private:
  kernels::Backend& backend_;
};

class HeapBuffers final : public BufferSource {
 public:
  HeapBuffers() = default;
  HeapBuffers(const HeapBuffers&) = delete;
  HeapBuffers& operator=(const HeapBuffers&) = delete;
  // Unmaps what was not released.
  ~HeapBuffers() override;
  // Throws std::bad_alloc when the mapping fails.
  float* allocate(std::size_t count, const char* what) override;
  // nullptr is fine; a pointer this source did not hand out is a programming error (std::invalid_argument).
  void release(float* data) override;
  // Whether `data` is a buffer this source handed out and has not released.
  bool owns(const float* data) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const float*, std::size_t> bytes_;  // buffer -> its mapping's bytes
};

}  // namespace dtrain::trainer
