#pragma once

// ZeRO gradient reduction: each unit's gradient (shards.h) is reduce-scattered in place as soon as backward has
// passed the unit's start, so rank r ends with the sum over ranks of its shard while backward goes on with the
// units before it (the communicator runs collectives in issue order on its own thread, as for DDP's buckets).
// Gradients arrive already divided by W (the loop's loss scale is 1 / (K W)), so the sum is the mean over ranks.
//
// With release_grads (stages 2 and 3) the rest of a unit's gradient is released (pages.h) once its reduce-scatter
// has finished: it reads as zeros again, so the next micro-step's backward accumulates its local gradient there
// while the owned shard keeps the reduced sum so far; the next reduce-scatter then adds the reduced sum (held by one
// rank only) to everyone's new gradient, and the shard holds the mean over ranks and micro-steps.
//
// Per backward pass, as DdpReducer:
//   reducer.begin_backward(sync);     // stage 1: sync only on the last micro-step (no_sync); stages 2, 3: always
//   model.backward(..., [&](std::size_t offset, std::size_t count) { reducer.grads_ready(offset, count); });
//   reducer.finish_backward();        // waits for every unit; owned shards hold the mean gradient

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/parallel/ddp/reducer.h"
#include "trainer/parallel/zero/shards.h"

namespace dtrain::trainer {

class ZeroReducer {
 public:
  ZeroReducer(Communicator& comm, const ZeroShards& shards, float* grads, bool release_grads);
  ZeroReducer(const ZeroReducer&) = delete;
  ZeroReducer& operator=(const ZeroReducer&) = delete;
  ~ZeroReducer();

  // Starts a pass; throws std::logic_error if the previous one was not finished.
  void begin_backward(bool sync);
  // grads[offset, offset + count) are final for this pass; ranges arrive in decreasing offset order and cover the
  // buffer exactly once per pass (std::logic_error otherwise).
  void grads_ready(std::size_t offset, std::size_t count);
  // Waits for every unit's reduce-scatter (throws CommError after all ended if one failed).
  void finish_backward();

  // Timing of the last synchronised pass (DdpStats' meaning, per unit instead of per bucket).
  const DdpStats& last_stats() const { return stats_; }
  // Bytes this rank has sent in reduce-scatters so far (ring accounting, shards.h); the loop reads the difference.
  std::uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  struct Pending {
    int unit;
    std::shared_ptr<Work> work;
  };
  void start_unit(int unit);
  // Waits for pending[i] and releases its unit's gradient outside the owned shard; returns an error or "".
  std::string complete(const Pending& p);
  // Completes the pending units that have finished (all of them with wait_all).
  std::string retire(bool wait_all);

  Communicator& comm_;
  const ZeroShards& shards_;
  float* grads_;
  bool release_grads_;
  DdpStats stats_;
  std::uint64_t bytes_sent_ = 0;

  bool in_pass_ = false;
  bool sync_ = false;
  std::size_t ready_from_ = 0;
  int next_unit_ = 0;  // the unit whose start backward reaches next (units go from the last to the first)
  std::vector<Pending> pending_;
  double comm_ms_ = 0;
  std::string failure_;
};

}  // namespace dtrain::trainer
