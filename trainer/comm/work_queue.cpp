#include "trainer/comm/work_queue.h"

#include <chrono>
#include <utility>

#include "trainer/comm/finishable_work.h"

namespace dtrain::trainer {

class WorkQueue::QueuedWork : public FinishableWork {};

WorkQueue::WorkQueue(CollectiveTrace* trace) : trace_(trace), thread_([this] { loop(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> WorkQueue::submit(std::string what, std::function<void()> run) {
  auto work = std::make_shared<QueuedWork>();
  {
    std::lock_guard lock(mutex_);
    const std::uint64_t seq = trace_ != nullptr ? trace_->issue(what) : 0;
    tasks_.push_back(Task{std::move(what), std::move(run), work, seq});
  }
  wake_.notify_one();
  return work;
}

void WorkQueue::loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    if (!first_failure_.empty()) {
      if (trace_ != nullptr) trace_->finished(task.seq);
      task.work->finish(task.what + " was not run: an earlier collective on this communicator failed: " +
                            first_failure_,
                        0);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    if (trace_ != nullptr) trace_->started(task.seq);
    std::string error;
    try {
      task.run();
    } catch (const std::exception& failure) {
      error = failure.what();
      first_failure_ = error;
    } catch (...) {
      error = task.what + " failed with an exception that is not a std::exception";
      first_failure_ = error;
    }
    const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (trace_ != nullptr) trace_->finished(task.seq);
    task.work->finish(std::move(error), elapsed);
  }
}

}  // namespace dtrain::trainer
