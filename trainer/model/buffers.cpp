#include "trainer/model/buffers.h"

#include <sys/mman.h>

#include <new>
#include <stdexcept>

namespace dtrain::trainer {

HeapBuffers::~HeapBuffers() {
  for (const auto& [data, bytes] : bytes_) ::munmap(const_cast<float*>(data), bytes);
}

float* HeapBuffers::allocate(std::size_t count, const char*) {
  if (count == 0) return nullptr;
  const std::size_t bytes = count * sizeof(float);
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw std::bad_alloc();
  std::lock_guard lock(mutex_);
  bytes_[static_cast<float*>(data)] = bytes;
  return static_cast<float*>(data);
}

void HeapBuffers::release(float* data) {
  if (data == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto it = bytes_.find(data);
  if (it == bytes_.end())
    throw std::invalid_argument("HeapBuffers::release: the pointer is not a buffer this source handed out");
  ::munmap(data, it->second);
  bytes_.erase(it);
}

bool HeapBuffers::owns(const float* data) const {
  std::lock_guard lock(mutex_);
  return bytes_.count(data) > 0;
}

}  // namespace dtrain::trainer
