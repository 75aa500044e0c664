#include "trainer/comm/local/communicator.h"

#include <algorithm>
#include <string>

namespace dtrain::trainer {

std::shared_ptr<Work> LocalCommunicator::allreduce(float*, std::size_t) { return done_work(); }

std::shared_ptr<Work> LocalCommunicator::allreduce_half(std::uint16_t*, std::size_t, kernels::Dtype) {
  return done_work();
}

std::shared_ptr<Work> LocalCommunicator::reduce_scatter(const float* in, float* out, std::size_t count_per_rank) {
  if (in != out) std::copy_n(in, count_per_rank, out);
  return done_work();
}

std::shared_ptr<Work> LocalCommunicator::reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out,
                                                             std::size_t count_per_rank, kernels::Dtype type) {
  refuse_fp32(type, "reduce_scatter of " + std::to_string(count_per_rank) + " values per rank", "reduce_scatter");
  if (in != out) std::copy_n(in, count_per_rank, out);
  return done_work();
}

std::shared_ptr<Work> LocalCommunicator::all_gather(const float* in, float* out, std::size_t count_per_rank) {
  if (in != out) std::copy_n(in, count_per_rank, out);
  return done_work();
}

std::shared_ptr<Work> LocalCommunicator::all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                                         std::size_t count_per_rank) {
  if (in != out) std::copy_n(in, count_per_rank, out);
  return done_work();
}

std::shared_ptr<Work> LocalCommunicator::broadcast(float*, std::size_t, int root) {
  if (root != 0) {
    throw CommError("broadcast: root " + std::to_string(root) +
                    " is not a rank of this single-rank (local) communicator; the only rank is 0");
  }
  return done_work();
}

}  // namespace dtrain::trainer
