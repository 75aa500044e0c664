#include "trainer/comm/standin/communicator.h"

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#include "trainer/common/host_wait.h"
#include "trainer/kernels/standin/arena.h"
#include "trainer/kernels/standin/backend.h"

namespace dtrain::trainer {

using kernels::StandinOpen;

StandinCommunicator::StandinCommunicator(std::unique_ptr<Communicator> host)
    : owned_(std::move(host)), host_(owned_.get()) {}

float* StandinCommunicator::allocate(std::size_t count) {
  return static_cast<float*>(kernels::standin_allocate(count * sizeof(float)));
}

void StandinCommunicator::release(float* data) { kernels::standin_release(data); }

void StandinCommunicator::copy_in(float* buffer, const float* host, std::size_t count) {
  note_host_wait("copy to the device");
  const StandinOpen open;
  if (count > 0) std::memcpy(buffer, host, count * sizeof(float));
}

void StandinCommunicator::copy_out(float* host, const float* buffer, std::size_t count) {
  note_host_wait("copy to the host");
  const StandinOpen open;
  if (count > 0) std::memcpy(host, buffer, count * sizeof(float));
}

namespace {

// A stand-in collective: finished when it was issued (run() below). Waiting for it is what waiting for a device
// collective is on a GPU, a host wait (common/host_wait.h); ordering it before the compute stream costs nothing.
class StandinWork final : public Work {
 public:
  void wait() override { note_host_wait("a device collective waited for"); }
  bool done() const override { return true; }
  void order_before(void* stream) override { (void)stream; }
};

}  // namespace

template <class Issue>
std::shared_ptr<Work> StandinCommunicator::run(const char* what,
                                               std::initializer_list<std::pair<const void*, std::size_t>> buffers,
                                               Issue issue) {
  for (const auto& [data, bytes] : buffers) {
    if (bytes > 0 && !kernels::standin_owns(data, bytes)) {
      std::ostringstream message;
      message << what << " of " << bytes << " bytes on rank " << rank() << ": buffer " << data
              << " is not device memory (a host pointer was passed to a device collective; with NCCL this "
                 "collective would fail)";
      throw CommError(message.str());
    }
  }
  const std::uint64_t before = host_->bytes_sent();
  {
    const StandinOpen open;
    issue()->wait();
  }
  count_sent(host_->bytes_sent() - before);
  return std::make_shared<StandinWork>();
}

std::shared_ptr<Work> StandinCommunicator::allreduce(float* data, std::size_t count) {
  return run("allreduce", {{data, count * sizeof(float)}}, [&] { return host_->allreduce(data, count); });
}

std::shared_ptr<Work> StandinCommunicator::reduce_scatter(const float* in, float* out, std::size_t n) {
  return run("reduce_scatter", {{in, n * size() * sizeof(float)}, {out, n * sizeof(float)}},
             [&] { return host_->reduce_scatter(in, out, n); });
}

std::shared_ptr<Work> StandinCommunicator::all_gather(const float* in, float* out, std::size_t n) {
  return run("all_gather", {{in, n * sizeof(float)}, {out, n * size() * sizeof(float)}},
             [&] { return host_->all_gather(in, out, n); });
}

std::shared_ptr<Work> StandinCommunicator::broadcast(float* data, std::size_t count, int root) {
  return run("broadcast", {{data, count * sizeof(float)}}, [&] { return host_->broadcast(data, count, root); });
}

std::shared_ptr<Work> StandinCommunicator::allreduce_half(std::uint16_t* data, std::size_t count,
                                                          kernels::Dtype type) {
  return run("allreduce_half", {{data, count * 2}}, [&] { return host_->allreduce_half(data, count, type); });
}

std::shared_ptr<Work> StandinCommunicator::all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                                           std::size_t n) {
  return run("all_gather_half", {{in, n * 2}, {out, n * size() * 2}},
             [&] { return host_->all_gather_half(in, out, n); });
}

std::shared_ptr<Work> StandinCommunicator::reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out,
                                                               std::size_t n, kernels::Dtype type) {
  return run("reduce_scatter_half", {{in, n * size() * 2}, {out, n * 2}},
             [&] { return host_->reduce_scatter_half(in, out, n, type); });
}

std::unique_ptr<Communicator> standin_communicator(std::unique_ptr<Communicator> host) {
  return std::make_unique<StandinCommunicator>(std::move(host));
}

}  // namespace dtrain::trainer
