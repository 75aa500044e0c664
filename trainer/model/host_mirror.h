#pragma once

// Host access to a buffer of a compute backend's memory, for the code around the ops that reads or writes whole
// buffers on the host (initialisation, checkpoints, AdamW's moments on resume). With a backend whose memory the host
// can use (kernels::Backend::host_accessible(), the cpu backend) the mirror IS the buffer: data() returns it and
// commit() does nothing, so the CPU path is unchanged. Otherwise (a GPU) data() is a host copy, read from the buffer
// when the mirror is made with Read::yes, and commit() copies it back.

#include <cstddef>
#include <vector>

#include "trainer/kernels/backend.h"

namespace dtrain::trainer {

class HostMirror {
 public:
  enum class Read { no, yes };

  // `buffer` holds `count` floats of `backend`'s memory. Read::no: the host copy starts as zeros (the caller
  // overwrites all of it).
  HostMirror(kernels::Backend& backend, float* buffer, std::size_t count, Read read = Read::yes)
      : backend_(backend), buffer_(buffer), count_(count) {
    if (backend_.host_accessible() || buffer_ == nullptr) return;
    copy_.assign(count_, 0.0f);
    if (read == Read::yes) backend_.copy_out(copy_.data(), buffer_, count_ * sizeof(float));
  }
  // Read-only access to a const buffer.
  HostMirror(kernels::Backend& backend, const float* buffer, std::size_t count)
      : HostMirror(backend, const_cast<float*>(buffer), count, Read::yes) {}

  float* data() { return mirrored() ? copy_.data() : buffer_; }
  const float* data() const { return mirrored() ? copy_.data() : buffer_; }
  // The host copy back into the buffer (nothing to do when the mirror is the buffer).
  void commit() {
    if (mirrored()) backend_.copy_in(buffer_, copy_.data(), count_ * sizeof(float));
  }

 private:
  bool mirrored() const { return !copy_.empty(); }

  kernels::Backend& backend_;
  float* buffer_;
  std::size_t count_;
  std::vector<float> copy_;
};

}  // namespace dtrain::trainer
