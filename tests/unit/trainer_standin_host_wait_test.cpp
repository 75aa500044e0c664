// Host waits inside a step (trainer/common/host_wait.h, DTRAIN_SYNC_DEBUG) as the stand-in for a device reports them:
// its copies and value-returning ops are host waits, refused in error mode, counted and logged once in warn mode,
// not checked outside a step or where a wait is meant; a device collective waited for is one, one ordered before the
// compute stream (DeferredCollectives) is not, until the window waits for it. And the loader's token pool
// (trainer/data/token_pool.h), which must not wait for a device that is behind: it grows instead, and reuses a slot
// once the device has passed its fence. And the step window (trainer/train/report/step_window.h): --log-every steps
// on a device, read back oldest first; one step on a host backend.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/comm/local/communicator.h"
#include "trainer/comm/standin/communicator.h"
#include "trainer/common/host_wait.h"
#include "trainer/data/token_pool.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/standin/backend.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/train/report/step_window.h"

using namespace dtrain::trainer;

namespace trainer_standin_host_wait_test {

std::string thrown(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("a copy back from the device inside a checked step is refused, counted or passed, as the mode says") {
  kernels::Backend& device = kernels::standin_backend();
  float* data = device.allocate(4);
  float host[4] = {};
  const std::uint64_t before = host_waits_noted();
  device.copy_out(host, data, sizeof(host));  // outside a step: not checked
  CHECK(host_waits_noted() == before);
  {
    const HostWaitCheck check(SyncDebug::error);
    const std::string message = thrown([&] { device.copy_out(host, data, sizeof(host)); });
    CHECK(message.find("inside a training step (copy to the host)") != std::string::npos);
    CHECK(message.find("DTRAIN_SYNC_DEBUG") != std::string::npos);
    CHECK(thrown([&] { device.sum_squares(data, 4); }).find("sum of squares") != std::string::npos);
    CHECK(thrown([&] { device.synchronize(); }).find("synchronize") != std::string::npos);
    {
      const AllowedHostWait allowed("a test's read");
      CHECK(thrown([&] { device.copy_out(host, data, sizeof(host)); }).empty());
    }
    // Ops that leave their results in the device's memory are no waits.
    CHECK(thrown([&] {
            device.mean_of(data, data + 1, 3);
            device.norm_of(data, reinterpret_cast<double*>(data + 2));
          }).empty());
    // A host backend never waits for a device.
    float a[2] = {1, 2};
    CHECK(thrown([&] { kernels::cpu_backend().copy_out(host, a, sizeof(a)); }).empty());
  }
  {
    const HostWaitCheck check(SyncDebug::warn);
    device.copy_out(host, data, sizeof(host));
    device.copy_out(host, data, sizeof(host));
    CHECK(host_waits_noted() == before + 3 + 2);  // the three refused above, and these two
  }
  device.release(data);
}

TEST_CASE("DTRAIN_SYNC_DEBUG takes off, warn or error and refuses anything else, naming it") {
  setenv("DTRAIN_SYNC_DEBUG", "warn", 1);
  CHECK(sync_debug_from_env() == SyncDebug::warn);
  setenv("DTRAIN_SYNC_DEBUG", "loud", 1);
  CHECK(thrown([] { sync_debug_from_env(); }).find("DTRAIN_SYNC_DEBUG='loud'") != std::string::npos);
  unsetenv("DTRAIN_SYNC_DEBUG");
  CHECK(sync_debug_from_env() == SyncDebug::off);
}

TEST_CASE("a deferred device collective is ordered, not waited for, until the window waits for it") {
  LocalCommunicator local;
  StandinCommunicator comm(local);
  kernels::Backend& device = kernels::standin_backend();
  float* data = device.allocate(8);
  {  // the check ends before `data` is freed
    const HostWaitCheck check(SyncDebug::error);
    // Without deferral, waiting for a device collective is a host wait.
    CHECK(thrown([&] { wait_collective(comm.allreduce(data, 8)); }).find("device collective") != std::string::npos);
    {
      DeferredCollectives deferred(device.compute_stream());
      CHECK(thrown([&] { wait_collective(comm.allreduce(data, 8), "test"); }).empty());
      CHECK(deferred.kept() == 1);
      // The Work& form is for results the host reads: it always waits.
      CHECK(!thrown([&] { wait_collective(*comm.allreduce(data, 8)); }).empty());
      const AllowedHostWait allowed("the window's read");
      deferred.wait_all();
      CHECK(deferred.kept() == 0);
    }
    // A free waits for the device too.
    CHECK(thrown([&] { device.release(device.allocate(1)); }).find("cudaFree") != std::string::npos);
  }
  device.release(data);
}

TEST_CASE("the token pool grows while the device is behind, and reuses a slot once its fence has passed") {
  kernels::Backend& device = kernels::standin_backend();
  auto pool = std::make_shared<TokenPool>(&device, 9);
  std::int32_t* first = pool->take();
  first[8] = 7;  // host memory: the loader writes it directly
  kernels::standin_hold_fences(true);
  pool->give_back(first, device.record_fence());
  std::int32_t* second = pool->take();
  CHECK(second != first);  // the copy from `first` may still be running: a new slot, no wait
  CHECK(pool->slots() == 2);
  kernels::standin_hold_fences(false);
  pool->give_back(second, 0);
  CHECK(pool->take() == first);  // the oldest, now passed
  CHECK(pool->take() == second);
  CHECK(pool->slots() == 2);
  {
    TokenSlot slot(pool, pool->take());  // a third: both are taken
    CHECK(pool->slots() == 3);
    slot.free_after(device.record_fence());
  }
  CHECK(pool->take() != nullptr);
  CHECK(pool->slots() == 3);  // the slot given back by its TokenSlot was reused
}

}  // namespace trainer_standin_host_wait_test

namespace trainer_standin_step_window_test {

// Step `step`'s loss slot holds loss_sum (the allreduced sum) and its norm slot `norm`, written as a device op would.
void fill(kernels::Backend& device, StepWindow& window, float loss_sum, float norm) {
  const float values[2] = {loss_sum, norm};
  const AllowedHostWait allowed("a test's write");
  device.copy_in(window.loss(), values, sizeof(values));
}

TEST_CASE("a device's step window holds --log-every steps and reads them back with one wait, oldest first") {
  LocalCommunicator local;
  StandinCommunicator comm(local);
  kernels::Backend& device = kernels::standin_backend();
  StepWindow window(device, comm, 2, 3);
  CHECK(window.deferred());
  for (std::uint64_t step = 1; step <= 3; ++step) {
    fill(device, window, 2.0f * static_cast<float>(step), 10.0f * static_cast<float>(step));
    StepMetrics m;
    m.step = step;
    m.step_ms = 1;
    window.close_step(m, StepTimes{});
    CHECK(window.due(step, 100, false) == (step == 3));  // full at --log-every steps
  }
  const std::vector<WindowStep> read = window.read();
  REQUIRE(read.size() == 3);
  for (std::uint64_t i = 0; i < 3; ++i) {
    CHECK(read[i].metrics.step == i + 1);
    CHECK(read[i].metrics.loss == doctest::Approx(2.0 * static_cast<double>(i + 1)));  // one rank: loss_sum / 1
    CHECK(read[i].metrics.grad_norm == doctest::Approx(10.0 * static_cast<double>(i + 1)));
  }
  StepMetrics m;
  m.step = 4;
  fill(device, window, 1, 1);
  window.close_step(m, StepTimes{});
  CHECK(!window.due(4, 100, false));
  CHECK(window.due(4, 100, true));  // a checkpoint follows
  CHECK(window.due(4, 4, false));   // the last step
}

TEST_CASE("a host backend's window is one step: read after each") {
  LocalCommunicator local;
  StepWindow window(kernels::cpu_backend(), local, 1, 50);
  CHECK(!window.deferred());
  *window.loss() = 3.5f;
  window.close_step(StepMetrics{}, StepTimes{});
  CHECK(window.due(1, 100, false));
  CHECK(window.read().at(0).metrics.loss == 3.5);
}

}  // namespace trainer_standin_step_window_test
