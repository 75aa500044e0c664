// The training thread's waits on collectives (trainer/metrics/comm_time.h, step_times.h): over 2 real Gloo ranks
// whose every collective finishes a fixed delay after it was issued (a slow link), ZeRO-3's all-gathers awaited in
// forward and ZeRO-1's all-gathers after the optimizer update are exposed communication, not compute or optimizer
// time, and comm_ms counts every collective's duration. And each wait names the bucket or unit it waits for as the
// worker's phase (health/phase.h), then gives the phase it found back.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "small_gpt_config.h"
#include "tests/unit/gloo_ranks.h"
#include "trainer/health/phase.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/metrics/step_times.h"
#include "trainer/model/gpt.h"
#include "trainer/parallel/ddp/reducer.h"
#include "trainer/parallel/zero/engine.h"
#include "trainer/parallel/zero/gatherer.h"
#include "trainer/parallel/zero/reducer.h"

using namespace dtrain::trainer;

namespace {

using Clock = std::chrono::steady_clock;

// Long against the small model's compute (well under a millisecond a unit), short enough for a quick test.
constexpr std::chrono::milliseconds kLinkDelay{40};
const double kDelayMs = static_cast<double>(kLinkDelay.count());

// A collective that finishes `delay` after it was issued at the earliest, its duration the link's delay longer.
class DelayedWork : public Work {
 public:
  DelayedWork(std::shared_ptr<Work> inner, std::chrono::milliseconds delay)
      : inner_(std::move(inner)), delay_(delay), ready_(Clock::now() + delay) {}
  void wait() override {
    inner_->wait();
    std::this_thread::sleep_until(ready_);
  }
  bool done() const override { return inner_->done() && Clock::now() >= ready_; }
  double elapsed_ms() const override { return inner_->elapsed_ms() + static_cast<double>(delay_.count()); }

 private:
  std::shared_ptr<Work> inner_;
  std::chrono::milliseconds delay_;
  Clock::time_point ready_;
};

// `inner`'s collectives over a slow link: each one's Work is a DelayedWork.
class DelayedCommunicator : public Communicator {
 public:
  explicit DelayedCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend() const override { return "delayed " + inner_.backend(); }
  std::shared_ptr<Work> allreduce(float* data, std::size_t count) override {
    return slow(inner_.allreduce(data, count));
  }
  std::shared_ptr<Work> reduce_scatter(const float* in, float* out, std::size_t count) override {
    return slow(inner_.reduce_scatter(in, out, count));
  }
  std::shared_ptr<Work> all_gather(const float* in, float* out, std::size_t count) override {
    return slow(inner_.all_gather(in, out, count));
  }
  std::shared_ptr<Work> broadcast(float* data, std::size_t count, int root) override {
    return slow(inner_.broadcast(data, count, root));
  }

 private:
  std::shared_ptr<Work> slow(std::shared_ptr<Work> work) {
    return std::make_shared<DelayedWork>(std::move(work), kLinkDelay);
  }
  Communicator& inner_;
};

std::vector<std::int32_t> tokens(int salt) {
  std::vector<std::int32_t> out(16);
  for (int i = 0; i < 16; ++i) out[static_cast<std::size_t>(i)] = (i * 37 + salt * 11) % 200;
  return out;
}

const AdamWOptions kAdamW{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};

}  // namespace

TEST_CASE("ZeRO-3: the all-gathers forward waits for are exposed communication, not compute") {
  GlooRanks ranks("zero3-wait");
  on_ranks(ranks, 2, "zero3-wait", [](int, Communicator& comm) {
    DelayedCommunicator slow(comm);
    Gpt model(small_gpt_config(), kernels::cpu_backend(), 2);
    model.init_weights(3);
    ZeroEngine zero(3, slow, model, kAdamW);
    zero.shard_params();
    const auto in = tokens(1), out = tokens(2);
    StepTimes times;
    const CommTime before = comm_time();
    timed("forward", times, &StepTimes::compute_ms, [&] { return model.forward(in.data(), out.data(), 2, 8); });
    const CommTime after = comm_time();
    // Forward gathers every unit (embeddings, 2 layers, the final LayerNorm), each prefetched only while the one
    // before computes: the thread waits about one delay per unit.
    const int units = zero.shards().num_units();
    CHECK(times.comm_exposed_ms >= (units - 1) * kDelayMs);
    CHECK(times.comm_exposed_ms == doctest::Approx(after.waited_ms - before.waited_ms));
    CHECK(times.compute_ms < times.comm_exposed_ms / units);
    CHECK(after.comm_ms - before.comm_ms >= units * kDelayMs);
  });
}

TEST_CASE("ZeRO-1: the gradient-norm and parameter all-gathers after backward are exposed, not optimizer time") {
  GlooRanks ranks("zero1-wait");
  on_ranks(ranks, 2, "zero1-wait", [](int rank, Communicator& comm) {
    DelayedCommunicator slow(comm);
    Gpt model(small_gpt_config(), kernels::cpu_backend(), 2);
    model.init_weights(3);
    ZeroEngine zero(1, slow, model, kAdamW);
    zero.shard_params();
    const auto in = tokens(1 + rank), out = tokens(2 + rank);
    StepTimes times;
    zero.zero_grad();
    model.forward(in.data(), out.data(), 2, 8);
    timed("backward", times, &StepTimes::compute_ms, [&] {
      zero.begin_backward(true);
      model.backward(0.5f, zero.grads_ready());
    });
    timed("reduce", times, &StepTimes::comm_exposed_ms, [&] { zero.finish_backward(); });
    const double reduce_ms = times.comm_exposed_ms;
    CHECK(reduce_ms > 0);
    timed("optimizer", times, &StepTimes::optimizer_ms, [&] {
      zero.clip_grad_norm(1.0f);
      zero.step(1e-2f, 1);
    });
    // One delay for the norms' all-gather, one for the parameters' (all units in flight at once).
    CHECK(times.comm_exposed_ms - reduce_ms >= 2 * kDelayMs * 0.95);
    CHECK(times.optimizer_ms < kDelayMs);
  });
}

TEST_CASE("DDP: comm_ms sums every bucket's allreduce, the wait for them is exposed") {
  GlooRanks ranks("ddp-wait");
  on_ranks(ranks, 2, "ddp-wait", [](int, Communicator& comm) {
    DelayedCommunicator slow(comm);
    std::vector<float> grads(64, 1.0f);
    DdpReducer ddp(slow, grads.data(), grads.size(), DdpOptions{64, 64});
    REQUIRE(ddp.buckets().size() == 4);
    StepTimes times;
    const CommTime before = comm_time();
    ddp.begin_backward(true);
    for (std::size_t end = grads.size(); end > 0; end -= 16) ddp.grads_ready(end - 16, 16);
    timed("reduce", times, &StepTimes::comm_exposed_ms, [&] { ddp.finish_backward(); });
    const CommTime after = comm_time();
    CHECK(after.comm_ms - before.comm_ms >= 4 * kDelayMs);
    CHECK(after.waited_ms - before.waited_ms >= kDelayMs * 0.95);
    CHECK(times.comm_exposed_ms >= after.waited_ms - before.waited_ms);
    CHECK(grads[0] == 1.0f);  // the mean of two ranks' ones
  });
}

namespace {

// Rank 0 of 2 whose collectives do nothing; each Work records the worker's phase when it is waited for.
class PhaseRecordingCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "phase-recording"; }
  std::shared_ptr<Work> allreduce(float*, std::size_t) override { return record(); }
  std::shared_ptr<Work> reduce_scatter(const float*, float*, std::size_t) override { return record(); }
  std::shared_ptr<Work> all_gather(const float*, float*, std::size_t) override { return record(); }
  std::shared_ptr<Work> broadcast(float*, std::size_t, int) override { return record(); }

  std::vector<std::string> phases;

 private:
  class RecordingWork : public Work {
   public:
    explicit RecordingWork(std::vector<std::string>& phases) : phases_(phases) {}
    void wait() override { phases_.push_back(current_phase()); }
    bool done() const override { return true; }

   private:
    std::vector<std::string>& phases_;
  };
  std::shared_ptr<Work> record() { return std::make_shared<RecordingWork>(phases); }
};

}  // namespace

TEST_CASE("a wait names the bucket or unit it waits for, then the phase it found is back") {
  PhaseRecordingCommunicator comm;
  SUBCASE("DDP buckets, numbered in the order they are reduced") {
    std::vector<float> grads(12, 1.0f);
    DdpReducer ddp(comm, grads.data(), grads.size(), DdpOptions{16, 16});
    set_phase("reduce (waiting for the gradient reductions)");
    ddp.begin_backward(true);
    ddp.grads_ready(0, grads.size());
    ddp.finish_backward();
    CHECK(comm.phases == std::vector<std::string>{"allreduce bucket 0", "allreduce bucket 1", "allreduce bucket 2"});
  }
  const ParamLayout layout(small_gpt_config(), 2);
  const ZeroShards shards(layout, 0, 2);
  SUBCASE("ZeRO reduce-scatters, from the last unit to the first") {
    std::vector<float> grads(layout.buffer_size(), 1.0f);
    ZeroReducer reducer(comm, shards, grads.data(), false);
    set_phase("reduce (waiting for the gradient reductions)");
    reducer.begin_backward(true);
    reducer.grads_ready(0, grads.size());
    reducer.finish_backward();
    CHECK(comm.phases == std::vector<std::string>{"reduce-scatter unit 3", "reduce-scatter unit 2",
                                                  "reduce-scatter unit 1", "reduce-scatter unit 0"});
  }
  SUBCASE("ZeRO-3 all-gathers in the middle of forward") {
    std::vector<float> params(layout.buffer_size(), 1.0f);
    ParamGatherer gatherer(comm, shards, params.data());
    gatherer.release_all();
    set_phase("forward");
    gatherer.gather(0);
    gatherer.gather(1);
    CHECK(comm.phases == std::vector<std::string>{"all-gather unit 0", "all-gather unit 1"});
    CHECK(std::strcmp(current_phase(), "forward") == 0);
    return;
  }
  CHECK(std::strcmp(current_phase(), "reduce (waiting for the gradient reductions)") == 0);
}

TEST_CASE("lasting phase names are made once per text and outlive whoever asked") {
  const char* first = nullptr;
  {
    const std::vector<const char*> names = numbered_phases("all-gather unit", 3);
    first = names[2];
  }
  CHECK(std::strcmp(first, "all-gather unit 2") == 0);
  CHECK(lasting_phase("all-gather unit 2") == first);
  CHECK(lasting_phase(std::string("all-gather unit ") + "2") == first);
}
