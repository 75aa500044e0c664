#pragma once

// Hierarchical collectives over two communicators: `node`, the ranks of this node (shm), and `cross`, the ranks of
// every node with this rank's local index (gloo; one such group per local rank index). Ranks are numbered node-major,
// global rank = node index * local size + local rank, as dtrain's launcher numbers them; every node has the same
// number of ranks (see make_communicator_from_env for jobs whose nodes differ).
//
//   allreduce:      node reduce_scatter (each local rank sums its 1/L slice over the node), cross allreduce of that
//                   slice over nodes, node all_gather; the count % L tail: node allreduce, then cross allreduce.
//   reduce_scatter: for every node block n, node reduce_scatter of its L chunks (local rank l gets chunk n*L+l summed
//                   over this node), then cross reduce_scatter of those N partial sums (node n keeps chunk n*L+l).
//   all_gather:     cross all_gather (the chunks of ranks n*L+l for every n), then node all_gather of each.
//   broadcast:      the root's cross group broadcasts from the root's node, then every node broadcasts from the
//                   root's local rank.
// bytes_sent() counts each collective as a flat ring over all ranks would send it, like the other backends and
// nccl-tests' busbw, so metrics and bench rows compare across backends; what actually crosses the network is the
// cross-node step's share (about 1/L of it per rank for allreduce).
// Sums run in a different order from a flat ring, so results match plain gloo exactly only where every partial sum
// is exact (integer-valued data); otherwise to the rounding of a few fp32 additions.
//
// The steps of one collective run in order on this communicator's own thread (work_queue.h), each waiting on the
// inner communicator's Work, whose deadline and dead-peer detection (CommError) carry through, the message prefixed
// with the collective and where this rank sits in the job, its node and its cross-node group.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "trainer/comm/communicator.h"
#include "trainer/comm/work_queue.h"

namespace dtrain::trainer {

class HierCommunicator : public Communicator {
 public:
  // node->size() ranks per node, cross->size() nodes; this rank is cross->rank() * node->size() + node->rank().
  HierCommunicator(std::unique_ptr<Communicator> node, std::unique_ptr<Communicator> cross);
  // Runs the collectives already issued, then the inner communicators leave.
  ~HierCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "hier"; }

  // Buffers in the node communicator's segment, where its collectives skip the staging copies.
  float* allocate(std::size_t count) override;
  void release(float* data) override;

  std::shared_ptr<Work> allreduce(float* data, std::size_t count) override;
  std::shared_ptr<Work> reduce_scatter(const float* in, float* out, std::size_t count_per_rank) override;
  std::shared_ptr<Work> all_gather(const float* in, float* out, std::size_t count_per_rank) override;
  std::shared_ptr<Work> broadcast(float* data, std::size_t count, int root) override;
  std::shared_ptr<Work> allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type) override;
  std::shared_ptr<Work> all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                        std::size_t count_per_rank) override;
  std::shared_ptr<Work> reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out, std::size_t count_per_rank,
                                            kernels::Dtype type) override;

 private:
  // queue_.submit, with a failure's CommError prefixed by `what` and where this rank sits in both groups.
  std::shared_ptr<Work> submit(const std::string& what, std::function<void()> run);

  std::unique_ptr<Communicator> node_;
  std::unique_ptr<Communicator> cross_;
  WorkQueue queue_;  // last: its thread stops before the communicators it calls are destroyed
};

}  // namespace dtrain::trainer
