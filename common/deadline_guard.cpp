#include "common/deadline_guard.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

// The process-wide timer: entries ordered by deadline; the thread sleeps until the earliest one.
class Timer {
 public:
  static Timer& instance() {
    static Timer timer;
    return timer;
  }

  std::uint64_t add(Clock::time_point when, std::function<void()> fn) {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = next_id_++;
    by_time_.emplace(std::make_pair(when, id), std::move(fn));
    deadlines_[id] = when;
    cv_.notify_all();
    return id;
  }

  void remove(std::uint64_t id) {
    std::unique_lock lock(mutex_);
    // An expiry in progress touches the guard's owner: wait for it before the owner goes away.
    cv_.wait(lock, [&] { return running_ != id; });
    expired_.erase(id);
    auto it = deadlines_.find(id);
    if (it == deadlines_.end()) return;
    by_time_.erase(std::make_pair(it->second, id));
    deadlines_.erase(it);
  }

  bool expired(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    return expired_.count(id) != 0;
  }

  ~Timer() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  Timer() : thread_([this] { run(); }) {}

  void run() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (by_time_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto first = by_time_.begin();
      if (const Clock::time_point when = first->first.first; Clock::now() < when) {
        // A copy: wait_until reads the deadline again after waking, and remove() may have erased this entry (its
        // key with it) meanwhile.
        cv_.wait_until(lock, when);
        continue;
      }
      const std::uint64_t id = first->first.second;
      std::function<void()> fn = std::move(first->second);
      by_time_.erase(first);
      deadlines_.erase(id);
      expired_.insert(id);
      running_ = id;
      lock.unlock();
      fn();
      lock.lock();
      running_ = 0;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::pair<Clock::time_point, std::uint64_t>, std::function<void()>> by_time_;
  std::map<std::uint64_t, Clock::time_point> deadlines_;
  std::set<std::uint64_t> expired_;   // guards whose callback ran and that are still alive
  std::uint64_t next_id_ = 1;
  std::uint64_t running_ = 0;         // the guard whose callback runs now, 0 for none
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

DeadlineGuard::DeadlineGuard(std::chrono::milliseconds timeout, std::function<void()> on_expiry)
    : id_(Timer::instance().add(Clock::now() + timeout, std::move(on_expiry))) {}

DeadlineGuard::~DeadlineGuard() { Timer::instance().remove(id_); }

bool DeadlineGuard::expired() const { return Timer::instance().expired(id_); }

}  // namespace dtrain
