#pragma once

// One thread that runs a backend's collectives in the order they were issued and completes their Work handles.
// A task that throws fails its Work with the exception's message; the queue is then broken: every later task fails
// at once with a message that names the first failure, because the ranks' sequences of collectives no longer line up.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

class WorkQueue {
 public:
  WorkQueue();
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
  };

  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::string first_failure_;  // touched only by the thread
  std::thread thread_;
};

}  // namespace dtrain::trainer
