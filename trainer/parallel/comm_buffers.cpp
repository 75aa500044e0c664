#include "trainer/parallel/comm_buffers.h"

#include <cstring>
#include <stdexcept>
#include <utility>

#include "trainer/comm/describe.h"

namespace dtrain::trainer {

CommBuffers::CommBuffers(Communicator& comm, std::function<void(const std::string&)> notice)
    : comm_(comm), notice_(std::move(notice)) {
  if (comm.device_buffers())
    throw std::logic_error("CommBuffers: the " + comm.backend() + " communicator's buffers are device memory; a "
                           "model on the cpu backend cannot compute on them (use collective_buffers)");
}

float* CommBuffers::allocate(std::size_t count, const char* what) {
  if (count == 0) return nullptr;
  const std::size_t bytes = count * sizeof(float);
  float* data = nullptr;
  try {
    data = comm_.allocate(count);
    std::memset(data, 0, bytes);
    communicator_bytes_ += bytes;
  } catch (const CommError& error) {
    data = heap_.allocate(count, what);
    fallback_bytes_ += bytes;
    if (!noticed_ && notice_) {
      notice_(std::string(what) + " (" + describe_floats(count) + ") is in ordinary memory, not in the " + comm_.backend() +
              " communicator's shared memory, and so may be the buffers after it (said once): " + error.what() +
              ". Training goes on; collectives on such buffers copy through the segment's staging slots (slower). "
              "To keep the model's buffers in shared memory, give /dev/shm room for 8 bytes per parameter per rank "
              "(2 more with a 16-bit --precision, 2 more with a 16-bit --ddp-comm-dtype or --reduce-dtype) beyond "
              "the communicator's own use: df -h /dev/shm; in a container, docker run --shm-size=... (Kubernetes: an "
              "emptyDir with medium Memory mounted at /dev/shm).");
    }
    noticed_ = true;
  }
  sizes_[data] = bytes;
  return data;
}

void CommBuffers::release(float* data) {
  if (data == nullptr) return;
  const auto it = sizes_.find(data);
  if (it == sizes_.end())
    throw std::invalid_argument("CommBuffers::release: the pointer is not a buffer this source handed out");
  if (heap_.owns(data)) {
    fallback_bytes_ -= it->second;
    heap_.release(data);
  } else {
    communicator_bytes_ -= it->second;
    comm_.release(data);
  }
  sizes_.erase(it);
}

std::unique_ptr<BufferSource> collective_buffers(Communicator& comm, kernels::Backend& backend,
                                                 std::function<void(const std::string&)> notice) {
  if (comm.device_buffers() || !backend.host_accessible()) return std::make_unique<BackendBuffers>(backend);
  return std::make_unique<CommBuffers>(comm, std::move(notice));
}

}  // namespace dtrain::trainer
