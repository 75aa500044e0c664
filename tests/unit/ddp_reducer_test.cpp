// DdpReducer on its own: bucket layout, range validation, world size 1 and no_sync. The communicator here records
// what the reducer asks of it (and sums nothing); reduction over real ranks is in comm_gloo_test.cpp.
#include <doctest/doctest.h>

#include <memory>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <vector>

#include "trainer/comm/local/communicator.h"
#include "trainer/parallel/ddp/reducer.h"

using dtrain::trainer::Communicator;
using dtrain::trainer::DdpOptions;
using dtrain::trainer::DdpReducer;
using dtrain::trainer::LocalCommunicator;
using dtrain::trainer::Work;
using Buckets = std::vector<std::pair<std::size_t, std::size_t>>;

namespace {

constexpr std::size_t kReducerMiB = std::size_t{1} << 20;
constexpr std::size_t kFloatsPerMiB = kReducerMiB / sizeof(float);

// Pretends to be one of `world` ranks; records each allreduce as (offset into the gradient buffer, count) and the
// first value it was given.
class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(int world, const float* base) : world_(world), base_(base) {}
  int rank() const override { return 0; }
  int size() const override { return world_; }
  std::string backend() const override { return "recording"; }
  std::shared_ptr<Work> allreduce(float* data, std::size_t count) override {
    calls.emplace_back(static_cast<std::size_t>(data - base_), count);
    first_values.push_back(data[0]);
    return dtrain::trainer::done_work();
  }
  std::shared_ptr<Work> reduce_scatter(const float*, float*, std::size_t) override { throw std::logic_error("unused"); }
  std::shared_ptr<Work> all_gather(const float*, float*, std::size_t) override { throw std::logic_error("unused"); }
  std::shared_ptr<Work> broadcast(float*, std::size_t, int) override { throw std::logic_error("unused"); }

  Buckets calls;
  std::vector<float> first_values;

 private:
  int world_;
  const float* base_;
};

// Reports the buffer ready in reverse chunks of `chunk` floats, as backward does.
void backward(DdpReducer& reducer, std::size_t count, std::size_t chunk) {
  for (std::size_t end = count; end > 0;) {
    std::size_t size = std::min(chunk, end);
    reducer.grads_ready(end - size, size);
    end -= size;
  }
}

}  // namespace

TEST_CASE("buckets are taken from the end: 1 MiB first, then 25 MiB each (--ddp-bucket-mb 25), the last the rest") {
  LocalCommunicator comm;
  const std::size_t count = 60 * kFloatsPerMiB + 123;  // 60 MiB and a bit
  std::vector<float> grads(count);
  DdpOptions options;
  options.bucket_bytes = std::size_t{25} << 20;
  DdpReducer reducer(comm, grads.data(), count, options);
  const std::size_t first = kFloatsPerMiB;
  const std::size_t rest = 25 * kFloatsPerMiB;
  Buckets expected = {{count - first, first},
                      {count - first - rest, rest},
                      {count - first - 2 * rest, rest},
                      {0, count - first - 2 * rest}};
  CHECK(reducer.buckets() == expected);
  CHECK(reducer.buckets().back().second == 9 * kFloatsPerMiB + 123);
}

TEST_CASE("a buffer smaller than the first bucket is one bucket; an empty buffer has none") {
  LocalCommunicator comm;
  std::vector<float> grads(1000);
  DdpReducer small(comm, grads.data(), grads.size());
  CHECK(small.buckets() == Buckets{{0, 1000}});
  DdpReducer empty(comm, grads.data(), 0);
  CHECK(empty.buckets().empty());
  empty.begin_backward(true);
  empty.finish_backward();
}

TEST_CASE("custom bucket sizes, and sizes that hold no float are refused") {
  LocalCommunicator comm;
  std::vector<float> grads(10);
  DdpReducer reducer(comm, grads.data(), 10, DdpOptions{8, 12});  // 2 floats, then 3 floats
  CHECK(reducer.buckets() == Buckets{{8, 2}, {5, 3}, {2, 3}, {0, 2}});
  CHECK_THROWS_AS(DdpReducer(comm, grads.data(), 10, DdpOptions{2, 12}), std::invalid_argument);
  CHECK_THROWS_AS(DdpReducer(comm, grads.data(), 10, DdpOptions{8, 0}), std::invalid_argument);
}

TEST_CASE("each bucket's allreduce starts as soon as backward passes its start, with grads divided by the world") {
  std::vector<float> grads(10, 6.0f);
  RecordingCommunicator comm(3, grads.data());
  DdpReducer reducer(comm, grads.data(), 10, DdpOptions{8, 12});  // buckets [8,10) [5,8) [2,5) [0,2)
  reducer.begin_backward(true);
  reducer.grads_ready(9, 1);
  CHECK(comm.calls.empty());
  reducer.grads_ready(6, 3);  // passes 8: first bucket
  CHECK(comm.calls == Buckets{{8, 2}});
  reducer.grads_ready(5, 1);  // exactly at 5: second bucket
  CHECK(comm.calls == Buckets{{8, 2}, {5, 3}});
  reducer.grads_ready(0, 5);  // covers the last two at once
  CHECK(comm.calls == Buckets{{8, 2}, {5, 3}, {2, 3}, {0, 2}});
  reducer.finish_backward();
  CHECK(comm.first_values == std::vector<float>{2.0f, 2.0f, 2.0f, 2.0f});
  for (float g : grads) CHECK(g == 2.0f);
  CHECK(reducer.last_stats().buckets == 4);
}

TEST_CASE("no_sync sends nothing and leaves the gradients as they are; the next synced pass sends them all") {
  std::vector<float> grads(10, 4.0f);
  RecordingCommunicator comm(2, grads.data());
  DdpReducer reducer(comm, grads.data(), 10, DdpOptions{8, 12});
  reducer.begin_backward(false);
  backward(reducer, 10, 3);
  reducer.finish_backward();
  CHECK(comm.calls.empty());
  for (float g : grads) CHECK(g == 4.0f);
  reducer.begin_backward(true);
  backward(reducer, 10, 3);
  reducer.finish_backward();
  CHECK(comm.calls.size() == 4);
  for (float g : grads) CHECK(g == 2.0f);
}

TEST_CASE("world size 1: gradients untouched, nothing to wait for, hidden fraction 1") {
  LocalCommunicator comm;
  std::vector<float> grads(3 * kFloatsPerMiB);
  std::iota(grads.begin(), grads.end(), 0.0f);
  const std::vector<float> before = grads;
  DdpReducer reducer(comm, grads.data(), grads.size());
  for (int pass = 0; pass < 2; ++pass) {
    reducer.begin_backward(true);
    backward(reducer, grads.size(), 100'000);
    reducer.finish_backward();
  }
  CHECK(grads == before);
  CHECK(reducer.last_stats().buckets == 3);  // 3 MiB in buckets of 1 MiB (the default's floor)
  CHECK(reducer.last_stats().comm_ms == 0);
  CHECK(reducer.last_stats().hidden_fraction() == 1.0);
}

TEST_CASE("ranges out of order, overlapping, with gaps, out of bounds or outside a pass are logic errors") {
  LocalCommunicator comm;
  std::vector<float> grads(10);
  DdpReducer reducer(comm, grads.data(), 10);

  CHECK_THROWS_AS(reducer.grads_ready(0, 10), std::logic_error);  // before begin_backward
  CHECK_THROWS_AS(reducer.finish_backward(), std::logic_error);

  reducer.begin_backward(true);
  CHECK_THROWS_AS(reducer.grads_ready(0, 5), std::logic_error);   // not the end of the buffer: a gap
  CHECK_THROWS_AS(reducer.grads_ready(8, 5), std::logic_error);   // past the end
  CHECK_THROWS_AS(reducer.grads_ready(11, 0), std::logic_error);  // past the end
  reducer.grads_ready(7, 3);
  CHECK_THROWS_AS(reducer.grads_ready(8, 2), std::logic_error);   // again: overlap
  CHECK_THROWS_AS(reducer.grads_ready(6, 3), std::logic_error);   // overlap
  CHECK_THROWS_AS(reducer.grads_ready(2, 3), std::logic_error);   // gap [5, 7)
  CHECK_THROWS_AS(reducer.finish_backward(), std::logic_error);   // [0, 7) missing
  CHECK_THROWS_AS(reducer.begin_backward(true), std::logic_error);  // previous pass open
  reducer.grads_ready(0, 7);
  reducer.finish_backward();

  try {
    reducer.begin_backward(true);
    reducer.grads_ready(0, 4);
    FAIL("expected a logic_error");
  } catch (const std::logic_error& error) {
    CHECK(std::string(error.what()).find("expected a range ending at 10") != std::string::npos);
  }
}
