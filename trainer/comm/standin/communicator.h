#pragma once

// The communicator that goes with the stand-in for a device backend (trainer/kernels/standin/backend.h), for tests
// of the plumbing: it wraps a host communicator and, as NCCL takes only device pointers, takes only buffers of the
// stand-in's memory. A collective on any other pointer fails with a CommError naming it; each collective runs with
// the stand-in's memory open, to its end, before it returns (so it overlaps nothing: this checks where buffers live,
// not speed). allocate() and the copies are the stand-in's. order_after() is recorded (order_after_stream()), so a
// test can tell that the trainer ordered communication after its compute stream.

#include <memory>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

class StandinCommunicator final : public Communicator {
 public:
  explicit StandinCommunicator(std::unique_ptr<Communicator> host);
  // Not owning `host`, which must outlive this one (tests with ranks as threads).
  explicit StandinCommunicator(Communicator& host) : host_(&host) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  // The host communicator's name and "+standin" ("shm+standin").
  std::string backend() const override { return host_->backend() + "+standin"; }
  bool device_buffers() const override { return true; }
  void order_after(void* stream) override { stream_ = stream; }
  void* order_after_stream() const { return stream_; }

  float* allocate(std::size_t count) override;
  void release(float* data) override;
  void copy_in(float* buffer, const float* host, std::size_t count) override;
  void copy_out(float* host, const float* buffer, std::size_t count) override;

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
  // Refuses a buffer outside the stand-in's memory, then issues the collective with the memory open and waits.
  template <class Issue>
  std::shared_ptr<Work> run(const char* what, std::initializer_list<std::pair<const void*, std::size_t>> buffers,
                            Issue issue);

  std::unique_ptr<Communicator> owned_;
  Communicator* host_;
  void* stream_ = nullptr;
};

// `host` wrapped (dtrain-trainer --device cuda with DTRAIN_DEVICE_STANDIN=1).
std::unique_ptr<Communicator> standin_communicator(std::unique_ptr<Communicator> host);

}  // namespace dtrain::trainer
