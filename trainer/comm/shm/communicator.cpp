#include "trainer/comm/shm/communicator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "trainer/comm/describe.h"
#include "trainer/comm/shm/arena.h"
#include "trainer/comm/shm/p2p.h"
#include "trainer/comm/shm/pipeline.h"
#include "trainer/comm/shm/sync.h"
#include "trainer/comm/work_queue.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<Segment> create_or_open(const ShmCommOptions& options, Clock::time_point deadline) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw CommError("shm communicator: rank " + std::to_string(options.rank) + " is outside [0, " +
                    std::to_string(options.size) + ")");
  }
  if (options.name.empty() || options.name.find('/') != std::string::npos) {
    throw CommError("shm communicator: segment name '" + options.name + "' must be non-empty and without '/'");
  }
  SegmentGeometry geometry = options.geometry;
  geometry.ranks = options.size;
  // The rings' counters count bytes modulo 2^32 (shm/p2p.h); a message header is 8 bytes.
  if (geometry.ring_bytes < 8 || geometry.ring_bytes >= (std::size_t{1} << 31)) {
    throw CommError("shm communicator: ring_bytes " + std::to_string(geometry.ring_bytes) +
                    " is outside [8 B, 2 GiB)");
  }
  if (options.rank == 0) return Segment::create(options.name, geometry);
  return Segment::open(options.name, geometry, deadline);
}

}  // namespace

struct ShmCommunicator::Impl {
  explicit Impl(const ShmCommOptions& o, Clock::time_point deadline)
      : options(o),
        segment(create_or_open(o, deadline)),
        sync(*segment, o.rank, o.timeout),
        arena(segment->fd(), segment->base(), segment->arena_offset(o.rank), segment->geometry().arena_bytes),
        p2p(std::make_shared<ShmP2p>(*segment, sync, o.rank, o.timeout)) {}

  ShmCommOptions options;
  std::unique_ptr<Segment> segment;
  PeerSync sync;
  Arena arena;
  std::shared_ptr<ShmP2p> p2p;  // shared with its Works, which may outlive the communicator
  // Last members: destroyed first, so the thread has finished before the segment goes.
  CollectiveTrace trace{"shm communicator"};
  WorkQueue queue{&trace};

  std::shared_ptr<Work> submit(ShmCollective c) {
    std::string what = c.what;
    return queue.submit(std::move(what), [this, c = std::move(c)] {
      run_shm_collective(*segment, sync, options.rank, c, Clock::now() + options.timeout);
    });
  }
};

ShmCommunicator::ShmCommunicator(ShmCommOptions options) {
  const auto deadline = Clock::now() + options.timeout;
  impl_ = std::make_unique<Impl>(options, deadline);
  if (options.rank == 0 && options.created) {
    try {
      options.created();
    } catch (...) {
      impl_->segment->unlink_name();
      throw;
    }
  }
  // The liveness mutex belongs to the thread that runs the collectives: it is held for as long as that thread is.
  impl_->queue.submit("join", [this] { impl_->sync.enter(); })->wait();
  try {
    impl_->sync.join(deadline);
  } catch (const CommError&) {
    if (options.rank == 0) impl_->segment->unlink_name();
    throw;
  }
  if (options.rank == 0) impl_->segment->unlink_name();
}

ShmCommunicator::~ShmCommunicator() {
  impl_->p2p->close();
  impl_->queue.submit("leave", [this] { impl_->sync.leave(); });
}

int ShmCommunicator::rank() const { return impl_->options.rank; }
int ShmCommunicator::size() const { return impl_->options.size; }
const std::string& ShmCommunicator::segment_name() const { return impl_->segment->name(); }

float* ShmCommunicator::allocate(std::size_t count) {
  if (count == 0) return nullptr;
  return static_cast<float*>(impl_->arena.allocate(count * sizeof(float)));
}

void ShmCommunicator::release(float* data) {
  if (data != nullptr && !impl_->arena.release(data)) {
    throw std::invalid_argument("shm communicator: release() of a buffer that allocate() did not return");
  }
}

bool ShmCommunicator::in_segment(const void* data, std::size_t bytes) const {
  return impl_->segment->arena_offset_of(impl_->options.rank, data, bytes) != SIZE_MAX;
}

std::shared_ptr<Work> ShmCommunicator::issue(ShmCollective c, Collective kind, std::uint64_t buffer_bytes) {
  count_sent(ring_bytes_per_rank(kind, buffer_bytes, size()));
  return impl_->submit(std::move(c));
}

namespace {

// "4099 bf16 values", for the 16-bit collectives' messages.
std::string describe_halves(std::size_t count, kernels::Dtype type) {
  return std::to_string(count) + " " + kernels::dtype_name(type) + " values";
}

}  // namespace

std::shared_ptr<Work> ShmCommunicator::allreduce(float* data, std::size_t count) {
  return issue({ShmShape::allreduce, "allreduce of " + describe_floats(count), kernels::Dtype::fp32, sizeof(float),
                data, data, count, 0},
               Collective::allreduce, count * sizeof(float));
}

std::shared_ptr<Work> ShmCommunicator::reduce_scatter(const float* in, float* out, std::size_t count_per_rank) {
  return issue({ShmShape::reduce_scatter, "reduce_scatter of " + describe_floats(count_per_rank) + " per rank",
                kernels::Dtype::fp32, sizeof(float), in, out, count_per_rank, 0},
               Collective::reduce_scatter, count_per_rank * size() * sizeof(float));
}

std::shared_ptr<Work> ShmCommunicator::all_gather(const float* in, float* out, std::size_t count_per_rank) {
  return issue({ShmShape::all_gather, "all_gather of " + describe_floats(count_per_rank) + " per rank",
                kernels::Dtype::fp32, sizeof(float), in, out, count_per_rank, 0},
               Collective::all_gather, count_per_rank * size() * sizeof(float));
}

std::shared_ptr<Work> ShmCommunicator::broadcast(float* data, std::size_t count, int root) {
  if (root < 0 || root >= size()) {
    throw CommError("broadcast: root " + std::to_string(root) + " is not a rank of this shm communicator of " +
                    std::to_string(size()) + " ranks");
  }
  return issue({ShmShape::broadcast, "broadcast of " + describe_floats(count) + " from rank " + std::to_string(root),
                kernels::Dtype::fp32, sizeof(float), data, data, count, root},
               Collective::broadcast, count * sizeof(float));
}

std::shared_ptr<Work> ShmCommunicator::allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type) {
  ShmCollective c{ShmShape::allreduce, "allreduce of " + describe_halves(count, type), type, 2, data, data, count, 0};
  refuse_fp32(type, c.what, "allreduce");
  return issue(std::move(c), Collective::allreduce, count * 2);
}

std::shared_ptr<Work> ShmCommunicator::all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                                       std::size_t count_per_rank) {
  // Nothing is added, so bf16 stands for either 16-bit type.
  return issue({ShmShape::all_gather, "all_gather of " + std::to_string(count_per_rank) + " 16-bit values per rank",
                kernels::Dtype::bf16, 2, in, out, count_per_rank, 0},
               Collective::all_gather, count_per_rank * size() * 2);
}

std::shared_ptr<Work> ShmCommunicator::reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out,
                                                           std::size_t count_per_rank, kernels::Dtype type) {
  ShmCollective c{ShmShape::reduce_scatter, "reduce_scatter of " + describe_halves(count_per_rank, type) + " per rank",
                  type, 2, in, out, count_per_rank, 0};
  refuse_fp32(type, c.what, "reduce_scatter");
  return issue(std::move(c), Collective::reduce_scatter, count_per_rank * size() * 2);
}

std::shared_ptr<Work> ShmCommunicator::send(const float* data, std::size_t count, int peer, int stream) {
  auto work = impl_->p2p->send(data, count, peer, stream);
  count_sent(count * sizeof(float));
  return work;
}

std::shared_ptr<Work> ShmCommunicator::recv(float* data, std::size_t count, int peer, int stream) {
  return impl_->p2p->recv(data, count, peer, stream);
}

}  // namespace dtrain::trainer
