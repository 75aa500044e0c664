#include "trainer/comm/communicator.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "trainer/comm/describe.h"

namespace dtrain::trainer {

namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool done() const override { return true; }
};

}  // namespace

std::shared_ptr<Work> done_work() { return std::make_shared<DoneWork>(); }

float* Communicator::allocate(std::size_t count) {
  if (count == 0) return nullptr;
  float* data = new (std::nothrow) float[count];
  if (data == nullptr) {
    throw CommError("cannot allocate " + std::to_string(count) + " floats of host memory for a " + backend() +
                    " buffer");
  }
  return data;
}

void Communicator::release(float* data) { delete[] data; }

void Communicator::copy_in(float* buffer, const float* host, std::size_t count) {
  if (count > 0) std::memcpy(buffer, host, count * sizeof(float));
}

void Communicator::copy_out(float* host, const float* buffer, std::size_t count) {
  if (count > 0) std::memcpy(host, buffer, count * sizeof(float));
}

std::shared_ptr<Work> Communicator::allreduce_half(std::uint16_t*, std::size_t count, kernels::Dtype type) {
  throw CommError("the " + backend() + " communicator has no 16-bit allreduce (asked for " + std::to_string(count) +
                  " " + kernels::dtype_name(type) + " values); use allreduce() on fp32, or the gloo or nccl backend");
}

std::shared_ptr<Work> Communicator::all_gather_half(const std::uint16_t*, std::uint16_t*, std::size_t count_per_rank) {
  throw CommError("the " + backend() + " communicator has no 16-bit all_gather (asked for " +
                  std::to_string(count_per_rank) + " values per rank); use all_gather() on fp32, or the gloo or "
                  "nccl backend");
}

std::shared_ptr<Work> Communicator::reduce_scatter_half(const std::uint16_t*, std::uint16_t*,
                                                        std::size_t count_per_rank, kernels::Dtype type) {
  throw CommError("the " + backend() + " communicator has no 16-bit reduce_scatter (asked for " +
                  std::to_string(count_per_rank) + " " + kernels::dtype_name(type) + " values per rank); use "
                  "reduce_scatter() on fp32, or the gloo or nccl backend");
}

std::shared_ptr<Work> Communicator::send(const float*, std::size_t count, int peer, int) {
  throw CommError("point-to-point is not supported by the " + backend() + " backend (send of " +
                  describe_floats(count) + " to rank " + std::to_string(peer) + "); pipeline parallelism needs the "
                  "gloo backend (DTRAIN_COMM_BACKEND=gloo)");
}

std::shared_ptr<Work> Communicator::recv(float*, std::size_t count, int peer, int) {
  throw CommError("point-to-point is not supported by the " + backend() + " backend (recv of " +
                  describe_floats(count) + " from rank " + std::to_string(peer) + "); pipeline parallelism needs "
                  "the gloo backend (DTRAIN_COMM_BACKEND=gloo)");
}

void Communicator::refuse_fp32(kernels::Dtype type, const std::string& what, const char* fp32_collective) const {
  if (type != kernels::Dtype::fp32) return;
  throw CommError(backend() + " " + what + ": the 16-bit collective takes bf16 or fp16, not fp32; use " +
                  fp32_collective + "() for fp32 buffers");
}

std::uint64_t ring_bytes_per_rank(Collective collective, std::uint64_t buffer_bytes, int ranks) {
  if (ranks <= 1) return 0;
  const std::uint64_t n = static_cast<std::uint64_t>(ranks);
  switch (collective) {
    case Collective::allreduce: return 2 * (n - 1) * buffer_bytes / n;
    case Collective::reduce_scatter:
    case Collective::all_gather: return (n - 1) * buffer_bytes / n;
    case Collective::broadcast: return buffer_bytes;
  }
  return 0;
}

}  // namespace dtrain::trainer
