#include "trainer/comm/gloo/communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "trainer/comm/describe.h"
#include "trainer/comm/gloo/impl.h"
#include "trainer/comm/gloo/network.h"
#include "trainer/comm/gloo/store_adapter.h"
#include "trainer/comm/job_store.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// Slot prefix of our ring reduce-scatter; gloo's own collectives use 0x01..0x08.
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
// reduce_scatter's segment: gloo's allreduce uses 1 MiB too (AllreduceOptions::kMaxSegmentSize). A whole number of
// elements of every type the ring adds.
constexpr std::size_t kSegmentBytes = std::size_t{1} << 20;

// gloo's reduce-function signature; out may alias a or b.
void gloo_sum_floats(void* out, const void* a, const void* b, std::size_t n) {
  float* c = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (std::size_t i = 0; i < n; ++i) c[i] = x[i] + y[i];
}

// 16-bit sums for gloo's reduce function (one per type: the signature has no room for it); out may alias a or b.
void gloo_sum_bf16(void* out, const void* a, const void* b, std::size_t n) {
  kernels::add_half(static_cast<std::uint16_t*>(out), static_cast<const std::uint16_t*>(a),
                    static_cast<const std::uint16_t*>(b), n, kernels::Dtype::bf16);
}
void gloo_sum_fp16(void* out, const void* a, const void* b, std::size_t n) {
  kernels::add_half(static_cast<std::uint16_t*>(out), static_cast<const std::uint16_t*>(a),
                    static_cast<const std::uint16_t*>(b), n, kernels::Dtype::fp16);
}

// The element types of our ring reduce-scatter (impl.h).
constexpr GlooRingSum kFloatSum{sizeof(float), &gloo_sum_floats};
constexpr GlooRingSum kBf16Sum{sizeof(std::uint16_t), &gloo_sum_bf16};
constexpr GlooRingSum kFp16Sum{sizeof(std::uint16_t), &gloo_sum_fp16};

std::atomic<int> gloo_communicators_created{0};

}  // namespace

// A collective issued after a send() or recv() failed is not run: the queue knows only the collectives' failures.
std::shared_ptr<Work> GlooCommunicator::Impl::submit(std::string what, std::function<void(uint32_t tag)> run) {
  return queue.submit(what, [this, what, run = std::move(run)] {
    const std::string earlier = failure->first();
    if (!earlier.empty()) {
      throw CommError(what + " was not run: an earlier operation on this communicator failed: " + earlier);
    }
    try {
      run(next_tag++);
    } catch (const std::exception& error) {
      const int left = (options.rank + options.size - 1) % options.size;
      const int right = (options.rank + 1) % options.size;
      throw CommError(failure->record(
          "gloo " + what + " failed on rank " + std::to_string(options.rank) + " of " + std::to_string(options.size) +
          " (" + endpoint + "; its ring neighbours are ranks " + std::to_string(left) + " and " +
          std::to_string(right) + "): " + error.what() +
          ". A peer that exited closes its connections at once; one that stopped answering fails the collective "
          "after the timeout of " + describe_seconds(options.timeout) +
          ". Check the other ranks' logs, and that every rank issues the same collectives in the same order with the "
          "same sizes"));
    }
  });
}

std::shared_ptr<Work> GlooCommunicator::Impl::reduce_scatter(std::string what, const void* in, void* out,
                                                             std::size_t n, GlooRingSum sum) {
  return submit(std::move(what), [this, in, out, n, sum](uint32_t tag) {
    if (n == 0) return;
    if (options.size == 1) {
      if (in != out) std::memcpy(out, in, n * sum.element_bytes);
      return;
    }
    ring_reduce_scatter(static_cast<const std::byte*>(in), static_cast<std::byte*>(out), n, sum, tag);
  });
}

// Ring reduce-scatter over unbound buffers, of `n` elements per rank added by `sum` (the chunk below is n of them,
// in bytes). In step s, rank r sends its partial sum of chunk (r - s - 1) to its right neighbour and receives its
// left neighbour's partial sum of chunk (r - s - 2), adding its own input to it; after size - 1 steps that sum is
// chunk r over every rank. Each rank sends (size - 1) / size of the input, like NCCL's ring. Chunks travel in
// segments so that summing one overlaps receiving the next; step 0 sends straight from the input and the last step
// sums straight into the output, so 2 ranks need no scratch copy at all.
void GlooCommunicator::Impl::ring_reduce_scatter(const std::byte* in, std::byte* out, std::size_t n, GlooRingSum sum,
                                                 uint32_t tag) {
  const int p = options.size;
  const int r = options.rank;
  const auto deadline = Clock::now() + options.timeout;
  const auto remaining = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const std::size_t chunk = n * sum.element_bytes;
  const std::size_t segments = (chunk + kSegmentBytes - 1) / kSegmentBytes;
  const auto segment_bytes = [&](std::size_t k) { return std::min(kSegmentBytes, chunk - k * kSegmentBytes); };

  scratch.resize(p > 2 ? 2 * chunk : chunk);
  std::byte* incoming = scratch.data();
  std::byte* partial = p > 2 ? scratch.data() + chunk : nullptr;  // what this rank sends in the next step
  auto in_buffer = context->createUnboundBuffer(const_cast<std::byte*>(in), static_cast<std::size_t>(p) * chunk);
  auto incoming_buffer = context->createUnboundBuffer(incoming, chunk);
  auto partial_buffer = p > 2 ? context->createUnboundBuffer(partial, chunk) : nullptr;

  for (int step = 0; step < p - 1; ++step) {
    const std::size_t send_chunk = static_cast<std::size_t>(((r - step - 1) % p + p) % p);
    const std::size_t recv_chunk = static_cast<std::size_t>(((r - step - 2) % p + p) % p);
    for (std::size_t k = 0; k < segments; ++k) {
      incoming_buffer->recv(left, slot, k * kSegmentBytes, segment_bytes(k));
    }
    for (std::size_t k = 0; k < segments; ++k) {
      if (step == 0) {
        in_buffer->send(right, slot, send_chunk * chunk + k * kSegmentBytes, segment_bytes(k));
      } else {
        partial_buffer->send(right, slot, k * kSegmentBytes, segment_bytes(k));
      }
    }
    std::byte* target = step == p - 2 ? out : partial;
    const std::byte* own = in + recv_chunk * chunk;
    auto& sending = step == 0 ? in_buffer : partial_buffer;
    for (std::size_t k = 0; k < segments; ++k) {
      if (!incoming_buffer->waitRecv(remaining())) {
        throw CommError("receive from rank " + std::to_string(left) + " was aborted");
      }
      // Segments complete in order on one pair, so segment k of what is being sent has left once k sends have.
      if (!sending->waitSend(remaining())) throw CommError("send to rank " + std::to_string(right) + " was aborted");
      const std::size_t at = k * kSegmentBytes;
      sum.add(target + at, incoming + at, own + at, segment_bytes(k) / sum.element_bytes);
    }
  }
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<store::StoreClient> store, GlooCommOptions options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw CommError("gloo communicator: rank " + std::to_string(options.rank) + " is outside [0, " +
                    std::to_string(options.size) + ")");
  }
  SigpipeBlocked sigpipe_blocked;  // before any thread of this communicator starts
  impl_ = std::make_unique<Impl>();
  impl_->options = options;
  gloo::transport::tcp::attr attr;
  if (!options.interface.empty()) {
    attr.iface = options.interface;
    impl_->endpoint = "interface " + options.interface;
  } else {
    attr.hostname = options.hostname.empty() ? "127.0.0.1" : options.hostname;
    impl_->endpoint = "address " + attr.hostname;
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& error) {
    throw CommError("gloo cannot listen on " + impl_->endpoint + " (rank " + std::to_string(options.rank) +
                    "): " + error.what() + ". Set GLOO_SOCKET_IFNAME to an interface of this host that reaches "
                    "the other ranks (see `ip addr`)");
  }
  impl_->endpoint = device->str();
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  context->setTimeout(options.timeout);
  GlooStoreAdapter adapter(std::move(store), options.prefix, options.timeout);
  try {
    context->connectFullMesh(adapter, device);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& error) {
    throw CommError("gloo rendezvous of rank " + std::to_string(options.rank) + " of " +
                    std::to_string(options.size) + " (" + impl_->endpoint + ", store keys '" + options.prefix +
                    "*') failed: " + error.what() +
                    ". Check that every rank can reach this address (GLOO_SOCKET_IFNAME picks the interface) and "
                    "that all ranks started within the timeout of " + describe_seconds(options.timeout));
  }
  impl_->context = std::move(context);
}

std::unique_ptr<GlooCommunicator> GlooCommunicator::from_env(int rank, int size, const CommOptions& options,
                                                             const std::string& group) {
  std::shared_ptr<store::StoreClient> store;
  try {
    store = std::make_shared<store::StoreClient>(job_store(options));
  } catch (const store::StoreError& error) {
    throw CommError(std::string("gloo communicator (rank ") + std::to_string(rank) +
                    ") cannot reach the job's store: " + error.what());
  }
  GlooNetwork network = gloo_network_from_env();
  GlooCommOptions gloo;
  gloo.rank = rank;
  gloo.size = size;
  gloo.prefix = "dtrain/gloo/" + std::to_string(gloo_communicators_created.fetch_add(1)) + "/" + group;
  gloo.interface = network.interface;
  gloo.hostname = network.hostname;
  gloo.timeout = options.timeout;
  try {
    return std::make_unique<GlooCommunicator>(std::move(store), gloo);
  } catch (const CommError& error) {
    throw CommError(std::string(error.what()) + " [network chosen from " + network.reason + "]");
  }
}

GlooCommunicator::~GlooCommunicator() = default;

int GlooCommunicator::rank() const { return impl_->options.rank; }
int GlooCommunicator::size() const { return impl_->options.size; }
const std::string& GlooCommunicator::endpoint() const { return impl_->endpoint; }

std::shared_ptr<Work> GlooCommunicator::allreduce(float* data, std::size_t count) {
  count_sent(ring_bytes_per_rank(Collective::allreduce, count * sizeof(float), size()));
  return impl_->submit("allreduce of " + describe_floats(count), [this, data, count](uint32_t tag) {
    if (count == 0 || impl_->options.size == 1) return;
    gloo::AllreduceOptions opts(impl_->context);
    opts.setOutput(data, count);
    opts.setReduceFunction(&gloo_sum_floats);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setTag(tag);
    opts.setTimeout(impl_->options.timeout);
    gloo::allreduce(opts);
  });
}

std::shared_ptr<Work> GlooCommunicator::allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type) {
  const std::string what = std::string("allreduce of ") + std::to_string(count) + " " + kernels::dtype_name(type) +
                           " values";
  refuse_fp32(type, what, "allreduce");
  count_sent(ring_bytes_per_rank(Collective::allreduce, count * sizeof(std::uint16_t), size()));
  return impl_->submit(what, [this, data, count, type](uint32_t tag) {
    if (count == 0 || impl_->options.size == 1) return;
    gloo::AllreduceOptions opts(impl_->context);
    opts.setOutput(data, count);
    opts.setReduceFunction(type == kernels::Dtype::bf16 ? &gloo_sum_bf16 : &gloo_sum_fp16);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setTag(tag);
    opts.setTimeout(impl_->options.timeout);
    gloo::allreduce(opts);
  });
}

std::shared_ptr<Work> GlooCommunicator::reduce_scatter(const float* in, float* out, std::size_t count_per_rank) {
  count_sent(ring_bytes_per_rank(Collective::reduce_scatter, count_per_rank * size() * sizeof(float), size()));
  return impl_->reduce_scatter("reduce_scatter of " + describe_floats(count_per_rank) + " per rank", in, out,
                               count_per_rank, kFloatSum);
}

std::shared_ptr<Work> GlooCommunicator::reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out,
                                                            std::size_t count_per_rank, kernels::Dtype type) {
  const std::string what = "reduce_scatter of " + std::to_string(count_per_rank) + " " + kernels::dtype_name(type) +
                           " values per rank";
  refuse_fp32(type, what, "reduce_scatter");
  count_sent(ring_bytes_per_rank(Collective::reduce_scatter, count_per_rank * size() * sizeof(std::uint16_t),
                                 size()));
  return impl_->reduce_scatter(what, in, out, count_per_rank, type == kernels::Dtype::bf16 ? kBf16Sum : kFp16Sum);
}

namespace {

// gloo's all_gather of count_per_rank elements of T (float, or 16-bit values) per rank.
template <typename T>
void gather_elements(const GlooCommOptions& options, const std::shared_ptr<gloo::rendezvous::Context>& context,
                     const T* in, T* out, std::size_t count_per_rank, uint32_t tag) {
  if (count_per_rank == 0) return;
  const std::size_t total = count_per_rank * static_cast<std::size_t>(options.size);
  T* mine = out + count_per_rank * static_cast<std::size_t>(options.rank);
  if (options.size == 1) {
    if (in != mine) std::copy_n(in, count_per_rank, mine);
    return;
  }
  gloo::AllgatherOptions opts(context);
  // gloo copies the input into this rank's chunk; an input already there needs no copy.
  if (in != mine) opts.setInput(const_cast<T*>(in), count_per_rank);
  opts.setOutput(out, total);
  opts.setTag(tag);
  opts.setTimeout(options.timeout);
  gloo::allgather(opts);
}

}  // namespace

std::shared_ptr<Work> GlooCommunicator::all_gather(const float* in, float* out, std::size_t count_per_rank) {
  count_sent(ring_bytes_per_rank(Collective::all_gather, count_per_rank * size() * sizeof(float), size()));
  return impl_->submit("all_gather of " + describe_floats(count_per_rank) + " per rank",
                       [this, in, out, count_per_rank](uint32_t tag) {
                         gather_elements(impl_->options, impl_->context, in, out, count_per_rank, tag);
                       });
}

std::shared_ptr<Work> GlooCommunicator::all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                                        std::size_t count_per_rank) {
  count_sent(ring_bytes_per_rank(Collective::all_gather, count_per_rank * size() * sizeof(std::uint16_t), size()));
  return impl_->submit("all_gather of " + std::to_string(count_per_rank) + " 16-bit values per rank",
                       [this, in, out, count_per_rank](uint32_t tag) {
                         gather_elements(impl_->options, impl_->context, in, out, count_per_rank, tag);
                       });
}

std::shared_ptr<Work> GlooCommunicator::broadcast(float* data, std::size_t count, int root) {
  if (root < 0 || root >= impl_->options.size) {
    throw CommError("broadcast: root " + std::to_string(root) + " is not a rank of this communicator of " +
                    std::to_string(impl_->options.size) + " ranks");
  }
  count_sent(ring_bytes_per_rank(Collective::broadcast, count * sizeof(float), size()));
  return impl_->submit("broadcast of " + describe_floats(count) + " from rank " + std::to_string(root),
                       [this, data, count, root](uint32_t tag) {
                         if (count == 0 || impl_->options.size == 1) return;
                         gloo::BroadcastOptions opts(impl_->context);
                         opts.setOutput(data, count);
                         opts.setRoot(root);
                         opts.setTag(tag);
                         opts.setTimeout(impl_->options.timeout);
                         gloo::broadcast(opts);
                       });
}

}  // namespace dtrain::trainer
