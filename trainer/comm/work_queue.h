#pragma once

// One thread that runs a backend's collectives in the order they were issued and completes their Work handles.
// A task that throws fails its Work with the exception's message; the queue is then broken: every later task fails
// at once with a message that names the first failure, because the ranks' sequences of collectives no longer line up.
// With a CollectiveTrace (trace.h) every task is recorded there: issued in submit(), started and finished by the
// thread (a failed task counts as finished: it no longer waits for anything).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "trainer/comm/communicator.h"
#include "trainer/comm/trace.h"

namespace dtrain::trainer {

class WorkQueue {
 public:
  explicit WorkQueue(CollectiveTrace* trace = nullptr);
  // Runs the tasks already submitted, then stops the thread.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `run`; `what` names it ("allreduce of 262144 floats") in the error of a task skipped after a failure.
  std::shared_ptr<Work> submit(std::string what, std::function<void()> run);

 private:
  class QueuedWork;
  struct Task {
    std::string what;
    std::function<void()> run;
    std::shared_ptr<QueuedWork> work;
    std::uint64_t seq = 0;   // in the trace
  };

  void loop();

  CollectiveTrace* trace_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::string first_failure_;  // touched only by the thread
  std::thread thread_;
};

}  // namespace dtrain::trainer
