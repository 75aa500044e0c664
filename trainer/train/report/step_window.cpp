#include "trainer/train/report/step_window.h"

#include <algorithm>
#include <stdexcept>

#include "trainer/common/host_wait.h"

namespace dtrain::trainer {
namespace {

// The longest the host goes without reading a device's window.
constexpr double kMaxUnreadSeconds = 10;

// Floats before the scratch double: the micro-steps' losses and two per step of the window, rounded up to even.
std::size_t scratch_offset(int micro_steps, std::size_t capacity) {
  const std::size_t floats = static_cast<std::size_t>(micro_steps) + 2 * capacity;
  return floats + floats % 2;
}

}  // namespace

StepWindow::StepWindow(kernels::Backend& backend, Communicator& comm, int micro_steps, long log_every)
    : backend_(backend),
      world_(comm.size()),
      micro_steps_(micro_steps),
      capacity_(backend.host_accessible() ? 1 : static_cast<std::size_t>(std::max(1L, log_every))),
      deferred_(backend.host_accessible() ? nullptr : std::make_unique<DeferredCollectives>(backend.compute_stream())),
      scratch_at_(scratch_offset(micro_steps, capacity_)),
      slots_(backend, scratch_at_ + 2) {
  pending_.reserve(capacity_);
}

void StepWindow::close_step(const StepMetrics& metrics, const StepTimes& times) {
  if (pending_.size() >= capacity_) throw std::logic_error("StepWindow: a step closed in a full window; read() first");
  pending_.push_back({metrics, times});
}

bool StepWindow::due(std::uint64_t step, std::uint64_t last_step, bool saving) const {
  if (pending_.empty()) return false;
  if (pending_.size() >= capacity_ || step >= last_step || saving) return true;
  return std::chrono::duration<double>(Clock::now() - last_read_).count() >= kMaxUnreadSeconds;
}

std::vector<WindowStep> StepWindow::read() {
  const AllowedHostWait allowed("the window's losses and norms");
  if (deferred_) deferred_->wait_all();
  std::vector<float> values(2 * pending_.size());
  backend_.copy_out(values.data(), slots_.data() + micro_steps_, values.size() * sizeof(float));
  const Clock::time_point now = Clock::now();
  std::vector<WindowStep> steps = std::move(pending_);
  pending_.clear();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    steps[i].metrics.loss = values[2 * i] / static_cast<float>(world_);
    steps[i].metrics.grad_norm = values[2 * i + 1];
  }
  if (deferred_ && !steps.empty()) {
    const double n = static_cast<double>(steps.size());
    const double step_ms = std::chrono::duration<double, std::milli>(now - last_read_).count() / n;
    const double comm_ms = (comm_time().comm_ms - comm_at_read_) / n;
    for (WindowStep& s : steps) {
      StepMetrics& m = s.metrics;
      m.tokens_per_s *= m.step_ms / step_ms;  // the batch's tokens over the window's time per step
      m.step_ms = step_ms;
      s.times.compute_ms =
          std::max(0.0, step_ms - s.times.data_wait_ms - s.times.comm_exposed_ms - s.times.bubble_ms);
      s.times.optimizer_ms = 0;
      if (m.comm_ms) {
        m.comm_ms = comm_ms;
        m.comm_hidden = comm_ms > 0 ? std::clamp(1.0 - *m.comm_exposed_ms / comm_ms, 0.0, 1.0) : 1.0;
      }
    }
  }
  last_read_ = now;
  comm_at_read_ = comm_time().comm_ms;
  return steps;
}

}  // namespace dtrain::trainer
