#include "trainer/comm/hier/communicator.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::trainer {

namespace {

// One name per step for fp32 and 16-bit elements, so each composition below is written once for both.
std::shared_ptr<Work> sum_all(Communicator& c, float* data, std::size_t n, kernels::Dtype) {
  return c.allreduce(data, n);
}
std::shared_ptr<Work> sum_all(Communicator& c, std::uint16_t* data, std::size_t n, kernels::Dtype type) {
  return c.allreduce_half(data, n, type);
}
std::shared_ptr<Work> sum_scatter(Communicator& c, const float* in, float* out, std::size_t n, kernels::Dtype) {
  return c.reduce_scatter(in, out, n);
}
std::shared_ptr<Work> sum_scatter(Communicator& c, const std::uint16_t* in, std::uint16_t* out, std::size_t n,
                                  kernels::Dtype type) {
  return c.reduce_scatter_half(in, out, n, type);
}
std::shared_ptr<Work> gather(Communicator& c, const float* in, float* out, std::size_t n) {
  return c.all_gather(in, out, n);
}
std::shared_ptr<Work> gather(Communicator& c, const std::uint16_t* in, std::uint16_t* out, std::size_t n) {
  return c.all_gather_half(in, out, n);
}

template <typename T>
void hier_allreduce(Communicator& node, Communicator& cross, T* data, std::size_t count, kernels::Dtype type) {
  const std::size_t local = static_cast<std::size_t>(node.size());
  const std::size_t per = count / local;
  if (per > 0) {
    T* slice = data + static_cast<std::size_t>(node.rank()) * per;
    sum_scatter(node, data, slice, per, type)->wait();
    sum_all(cross, slice, per, type)->wait();
    gather(node, slice, data, per)->wait();
  }
  const std::size_t tail = count - per * local;
  if (tail > 0) {
    sum_all(node, data + per * local, tail, type)->wait();
    sum_all(cross, data + per * local, tail, type)->wait();
  }
}

template <typename T>
void hier_reduce_scatter(Communicator& node, Communicator& cross, const T* in, T* out, std::size_t per,
                         kernels::Dtype type) {
  const std::size_t local = static_cast<std::size_t>(node.size());
  const std::size_t nodes = static_cast<std::size_t>(cross.size());
  std::vector<T> partial(nodes * per);
  for (std::size_t n = 0; n < nodes; ++n) {
    sum_scatter(node, in + n * local * per, partial.data() + n * per, per, type)->wait();
  }
  sum_scatter(cross, partial.data(), out, per, type)->wait();
}

template <typename T>
void hier_all_gather(Communicator& node, Communicator& cross, const T* in, T* out, std::size_t per) {
  const std::size_t local = static_cast<std::size_t>(node.size());
  const std::size_t nodes = static_cast<std::size_t>(cross.size());
  std::vector<T> columns(nodes * per);
  gather(cross, in, columns.data(), per)->wait();
  for (std::size_t n = 0; n < nodes; ++n) gather(node, columns.data() + n * per, out + n * local * per, per)->wait();
}

std::string floats(std::size_t count) { return std::to_string(count) + " elements"; }

}  // namespace

HierCommunicator::HierCommunicator(std::unique_ptr<Communicator> node, std::unique_ptr<Communicator> cross)
    : node_(std::move(node)), cross_(std::move(cross)) {}

HierCommunicator::~HierCommunicator() = default;

std::shared_ptr<Work> HierCommunicator::submit(const std::string& what, std::function<void()> run) {
  return queue_.submit(what, [this, what, run = std::move(run)] {
    try {
      run();
    } catch (const CommError& error) {
      // The inner error numbers ranks within its own group; say where this rank sits in both.
      throw CommError(what + " failed on rank " + std::to_string(rank()) + " of " + std::to_string(size()) +
                      " (node " + std::to_string(cross_->rank()) + ", local rank " + std::to_string(node_->rank()) +
                      "; within the node it is " + node_->backend() + " rank " + std::to_string(node_->rank()) +
                      " of " + std::to_string(node_->size()) + ", across nodes " + cross_->backend() + " rank " +
                      std::to_string(cross_->rank()) + " of " + std::to_string(cross_->size()) +
                      " among the ranks with local rank " + std::to_string(node_->rank()) + "): " + error.what());
    }
  });
}

int HierCommunicator::rank() const { return cross_->rank() * node_->size() + node_->rank(); }
int HierCommunicator::size() const { return cross_->size() * node_->size(); }

float* HierCommunicator::allocate(std::size_t count) { return node_->allocate(count); }
void HierCommunicator::release(float* data) { node_->release(data); }

std::shared_ptr<Work> HierCommunicator::allreduce(float* data, std::size_t count) {
  count_sent(ring_bytes_per_rank(Collective::allreduce, count * sizeof(float), size()));
  return submit("hierarchical allreduce of " + floats(count), [this, data, count] {
    hier_allreduce(*node_, *cross_, data, count, kernels::Dtype::fp32);
  });
}

std::shared_ptr<Work> HierCommunicator::reduce_scatter(const float* in, float* out, std::size_t count_per_rank) {
  count_sent(ring_bytes_per_rank(Collective::reduce_scatter, count_per_rank * size() * sizeof(float), size()));
  return submit("hierarchical reduce_scatter of " + floats(count_per_rank) + " per rank",
                       [this, in, out, count_per_rank] {
                         hier_reduce_scatter(*node_, *cross_, in, out, count_per_rank, kernels::Dtype::fp32);
                       });
}

std::shared_ptr<Work> HierCommunicator::all_gather(const float* in, float* out, std::size_t count_per_rank) {
  count_sent(ring_bytes_per_rank(Collective::all_gather, count_per_rank * size() * sizeof(float), size()));
  return submit("hierarchical all_gather of " + floats(count_per_rank) + " per rank",
                       [this, in, out, count_per_rank] { hier_all_gather(*node_, *cross_, in, out, count_per_rank); });
}

std::shared_ptr<Work> HierCommunicator::broadcast(float* data, std::size_t count, int root) {
  if (root < 0 || root >= size()) {
    throw CommError("hierarchical broadcast of " + floats(count) + ": root " + std::to_string(root) +
                    " is outside [0, " + std::to_string(size()) + ")");
  }
  count_sent(ring_bytes_per_rank(Collective::broadcast, count * sizeof(float), size()));
  return submit("hierarchical broadcast of " + floats(count), [this, data, count, root] {
    const int root_node = root / node_->size();
    const int root_local = root % node_->size();
    if (node_->rank() == root_local) cross_->broadcast(data, count, root_node)->wait();
    node_->broadcast(data, count, root_local)->wait();
  });
}

std::shared_ptr<Work> HierCommunicator::allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type) {
  refuse_fp32(type, "allreduce_half of " + floats(count), "allreduce");
  count_sent(ring_bytes_per_rank(Collective::allreduce, count * 2, size()));
  return submit("hierarchical 16-bit allreduce of " + floats(count), [this, data, count, type] {
    hier_allreduce(*node_, *cross_, data, count, type);
  });
}

std::shared_ptr<Work> HierCommunicator::all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                                        std::size_t count_per_rank) {
  count_sent(ring_bytes_per_rank(Collective::all_gather, count_per_rank * size() * 2, size()));
  return submit("hierarchical 16-bit all_gather of " + floats(count_per_rank) + " per rank",
                       [this, in, out, count_per_rank] { hier_all_gather(*node_, *cross_, in, out, count_per_rank); });
}

std::shared_ptr<Work> HierCommunicator::reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out,
                                                            std::size_t count_per_rank, kernels::Dtype type) {
  refuse_fp32(type, "reduce_scatter_half of " + floats(count_per_rank) + " per rank", "reduce_scatter");
  count_sent(ring_bytes_per_rank(Collective::reduce_scatter, count_per_rank * size() * 2, size()));
  return submit("hierarchical 16-bit reduce_scatter of " + floats(count_per_rank) + " per rank",
                       [this, in, out, count_per_rank, type] {
                         hier_reduce_scatter(*node_, *cross_, in, out, count_per_rank, type);
                       });
}

}  // namespace dtrain::trainer
