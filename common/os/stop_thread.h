#pragma once

// How an owner stops its background thread when that thread waits on a condition variable for a stop flag: set
// the flag under the mutex the thread waits with (so the wake-up cannot be missed between its check and its wait),
// wake it, and join it. What the thread does once woken (drain a queue, send what is pending, just return) is its
// own.

#include <condition_variable>
#include <mutex>
#include <thread>

namespace dtrain {

inline void stop_and_join(std::mutex& mutex, bool& stop, std::condition_variable& wake, std::thread& thread) {
  {
    std::lock_guard lock(mutex);
    stop = true;
  }
  wake.notify_all();
  thread.join();
}

}  // namespace dtrain
