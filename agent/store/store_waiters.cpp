// Store: pending get/wait calls, their deadlines and the timer thread that fires them (see store.h).

#include "agent/store/store.h"

#include <algorithm>

#include "agent/store/message_text.h"

namespace dtrain::store {
namespace {

constexpr std::size_t kKeysNamedInMessages = 5;

std::vector<std::string> distinct(std::span<const std::string> keys) {
  std::vector<std::string> out;
  for (const auto& key : keys) {
    if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(key);
  }
  return out;
}

}  // namespace

WaiterId Store::get(std::string_view token, std::string_view key, std::chrono::milliseconds timeout,
                    GetCallback done) {
  if (Status status = check_key(key); !status.ok()) {
    done({status});
    return kNoWaiter;
  }
  return add_waiter(token, {std::string(key)}, true, timeout,
                    [done = std::move(done)](Status status, std::string value) {
                      done({std::move(status), std::move(value)});
                    });
}

WaiterId Store::wait(std::string_view token, std::span<const std::string> keys, std::chrono::milliseconds timeout,
                     WaitCallback done) {
  if (Status status = check_keys(keys); !status.ok()) {
    done(status);
    return kNoWaiter;
  }
  return add_waiter(token, distinct(keys), false, timeout,
                    [done = std::move(done)](Status status, std::string) { done(std::move(status)); });
}

WaiterId Store::add_waiter(std::string_view token, std::vector<std::string> keys, bool is_get,
                           std::chrono::milliseconds timeout, std::function<void(Status, std::string)> done) {
  Status failure;
  std::string value;
  {
    std::lock_guard lock(mutex_);
    Namespace* ns = find_namespace(token, failure);
    Result<Clock::duration> limit = check_timeout(timeout);
    if (ns && !limit.ok()) failure = limit.status;
    if (ns && limit.ok()) {
      bool all = std::all_of(keys.begin(), keys.end(), [ns](const std::string& key) { return ns->data.contains(key); });
      if (all) {
        if (is_get) value = ns->data.find(keys.front())->second;
      } else {
        WaiterId id = next_waiter_++;
        Waiter& waiter = waiters_[id];
        waiter.ns = ns;
        waiter.is_get = is_get;
        waiter.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(limit.value);
        waiter.deadline = Clock::now() + limit.value;
        waiter.done = std::move(done);
        for (const auto& key : keys) ns->watchers[key].push_back(id);
        waiter.keys = std::move(keys);
        ns->waiters.insert(id);
        auto [slot, inserted] = deadlines_.emplace(waiter.deadline, id);
        if (slot == deadlines_.begin()) timer_wakeup_.notify_one();
        return id;
      }
    }
  }
  done(std::move(failure), std::move(value));
  return kNoWaiter;
}

bool Store::cancel(WaiterId id) {
  Ready ready;
  {
    std::lock_guard lock(mutex_);
    ready = take_waiter(id, {StatusCode::cancelled, "the call was cancelled by its caller"});
  }
  if (!ready) return false;
  ready();
  return true;
}

std::size_t Store::pending_waiters() const {
  std::lock_guard lock(mutex_);
  return waiters_.size();
}

Store::Ready Store::take_waiter(WaiterId id, Status status, std::string value) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return {};
  Waiter& waiter = it->second;
  deadlines_.erase({waiter.deadline, id});
  waiter.ns->waiters.erase(id);
  for (const auto& key : waiter.keys) {
    auto watching = waiter.ns->watchers.find(key);
    if (watching == waiter.ns->watchers.end()) continue;
    std::erase(watching->second, id);
    if (watching->second.empty()) waiter.ns->watchers.erase(watching);
  }
  auto done = std::move(waiter.done);
  waiters_.erase(it);
  return [done = std::move(done), status = std::move(status), value = std::move(value)]() mutable {
    done(std::move(status), std::move(value));
  };
}

std::string Store::timeout_message(const Waiter& waiter) const {
  if (waiter.is_get) {
    return "no process set key " + quoted(waiter.keys.front()) + " within " + ms_text(waiter.timeout);
  }
  std::vector<const std::string*> missing;
  for (const auto& key : waiter.keys) {
    if (!waiter.ns->data.contains(key)) missing.push_back(&key);
  }
  std::string names;
  for (std::size_t i = 0; i < missing.size() && i < kKeysNamedInMessages; ++i) {
    names += (i ? ", " : "") + quoted(*missing[i]);
  }
  if (missing.size() > kKeysNamedInMessages) names += ", ...";
  return "still missing " + names + " (" + std::to_string(missing.size()) + " of " +
         std::to_string(waiter.keys.size()) + " keys) after " + ms_text(waiter.timeout);
}

void Store::timer_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (deadlines_.empty()) {
      timer_wakeup_.wait(lock);
      continue;
    }
    Clock::time_point first = deadlines_.begin()->first;
    if (Clock::now() < first) {
      timer_wakeup_.wait_until(lock, first);
      continue;
    }
    std::vector<Ready> ready;
    Clock::time_point now = Clock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      WaiterId id = deadlines_.begin()->second;
      std::string message = timeout_message(waiters_.at(id));
      ready.push_back(take_waiter(id, {StatusCode::deadline_exceeded, std::move(message)}));
    }
    lock.unlock();
    run_all(ready);
    lock.lock();
  }
}

void Store::run_all(std::vector<Ready>& ready) {
  for (auto& completion : ready) {
    if (completion) completion();
  }
}

}  // namespace dtrain::store
