#include "agent/store/store.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "agent/store/message_text.h"

namespace dtrain::store {
namespace {

constexpr std::size_t kClosedTokensRemembered = 64;

// c10d stores add's counters as decimal strings; anything else (including "12abc") is not an integer.
bool parse_integer(std::string_view text, std::int64_t& out) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size();
}

// Checked before the timer thread starts: a constructor that throws after it would never join it.
StoreLimits checked(StoreLimits limits) {
  if (limits.value_bytes > kMaxValueBytes) {
    throw std::invalid_argument("store limit value_bytes of " + std::to_string(limits.value_bytes) +
                                " bytes is over the " + bytes_text(kMaxValueBytes) + " that fits in one message");
  }
  return limits;
}

}  // namespace

Store::Store(StoreLimits limits) : limits_(checked(limits)), timer_([this] { timer_loop(); }) {}

Store::~Store() {
  shutdown();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  timer_wakeup_.notify_all();
  timer_.join();
}

Status Store::open_namespace(std::string token) {
  if (token.empty()) return {StatusCode::invalid_argument, "a store namespace needs a non-empty token"};
  std::lock_guard lock(mutex_);
  if (shut_down_) return {StatusCode::unavailable, "the store is shutting down (the agent is stopping)"};
  std::erase(closed_tokens_, token);
  if (!namespaces_.contains(token)) namespaces_.emplace(std::move(token), std::make_unique<Namespace>());
  return {};
}

bool Store::drop_namespace(std::string_view token) {
  std::vector<Ready> ready;
  {
    std::lock_guard lock(mutex_);
    auto it = namespaces_.find(token);
    if (it == namespaces_.end()) return false;
    std::vector<WaiterId> ids(it->second->waiters.begin(), it->second->waiters.end());
    for (WaiterId id : ids) {
      ready.push_back(take_waiter(
          id, {StatusCode::aborted, "namespace closed (the round ended) while this call was waiting"}));
    }
    namespaces_.erase(it);
    closed_tokens_.emplace_back(token);
    if (closed_tokens_.size() > kClosedTokensRemembered) closed_tokens_.pop_front();
  }
  run_all(ready);
  return true;
}

void Store::shutdown() {
  std::vector<Ready> ready;
  {
    std::lock_guard lock(mutex_);
    shut_down_ = true;
    std::vector<WaiterId> ids;
    for (const auto& [id, waiter] : waiters_) ids.push_back(id);
    for (WaiterId id : ids) {
      ready.push_back(take_waiter(id, {StatusCode::unavailable, "the store is shutting down (the agent is stopping)"}));
    }
  }
  run_all(ready);
}

Store::Namespace* Store::find_namespace(std::string_view token, Status& status) {
  if (shut_down_) {
    status = {StatusCode::unavailable, "the store is shutting down (the agent is stopping)"};
    return nullptr;
  }
  if (token.empty()) {
    status = {StatusCode::unauthenticated,
              "no store token was given: every call must carry its round's token (DTRAIN_JOB_TOKEN) in the "
              "'dtrain-token' metadata entry"};
    return nullptr;
  }
  auto it = namespaces_.find(token);
  if (it != namespaces_.end()) return it->second.get();
  if (std::find(closed_tokens_.begin(), closed_tokens_.end(), token) != closed_tokens_.end()) {
    status = {StatusCode::unauthenticated,
              "the store token belongs to a round that has ended; its namespace is closed"};
  } else {
    status = {StatusCode::unauthenticated,
              "the store token matches no open round of this job (each round has its own token, given to its "
              "workers in DTRAIN_JOB_TOKEN)"};
  }
  return nullptr;
}

Status Store::check_key(std::string_view key) const {
  if (key.empty()) return {StatusCode::invalid_argument, "store keys must not be empty"};
  if (key.size() > kMaxKeyBytes) {
    return {StatusCode::invalid_argument, "key " + quoted(key, 40) + " is " + std::to_string(key.size()) +
                                              " bytes; the limit is " + std::to_string(kMaxKeyBytes) +
                                              " bytes (4 KiB)"};
  }
  return {};
}

Status Store::check_keys(std::span<const std::string> keys) const {
  if (keys.size() > kMaxKeysPerCall) {
    return {StatusCode::invalid_argument, std::to_string(keys.size()) + " keys in one call; the limit is " +
                                              std::to_string(kMaxKeysPerCall) + " keys per check or wait"};
  }
  for (const auto& key : keys) {
    if (Status status = check_key(key); !status.ok()) return status;
  }
  return {};
}

Status Store::check_value(std::string_view key, std::string_view what, std::size_t size) const {
  if (size <= limits_.value_bytes) return {};
  return {StatusCode::invalid_argument, std::string(what) + " for key " + quoted(key) + " is " +
                                            std::to_string(size) + " bytes; the limit is " +
                                            std::to_string(limits_.value_bytes) + " bytes (" +
                                            bytes_text(limits_.value_bytes) +
                                            "); keep large data out of the store (a shared file, with its path in "
                                            "the store)"};
}

Result<Store::Clock::duration> Store::check_timeout(std::chrono::milliseconds timeout) const {
  if (timeout.count() < 0) {
    return {{StatusCode::invalid_argument, "timeout must not be negative (0 means the default of 300000 ms)"}};
  }
  if (timeout > kMaxTimeout) {
    return {{StatusCode::invalid_argument,
             "timeout of " + ms_text(timeout) + " is over the limit of " + ms_text(kMaxTimeout) + " (1 hour)"}};
  }
  return {{}, timeout.count() == 0 ? kDefaultTimeout : timeout};
}

Status Store::set(std::string_view token, std::string_view key, std::string value) {
  if (Status status = check_key(key); !status.ok()) return status;
  if (Status status = check_value(key, "value", value.size()); !status.ok()) return status;
  std::vector<Ready> ready;
  {
    std::lock_guard lock(mutex_);
    Status status;
    Namespace* ns = find_namespace(token, status);
    if (!ns) return status;
    if (Status stored = store_value(*ns, "set", key, std::move(value), ready); !stored.ok()) return stored;
  }
  run_all(ready);
  return {};
}

Result<std::int64_t> Store::add(std::string_view token, std::string_view key, std::int64_t delta) {
  if (Status status = check_key(key); !status.ok()) return {status};
  std::vector<Ready> ready;
  std::int64_t sum = 0;
  {
    std::lock_guard lock(mutex_);
    Status status;
    Namespace* ns = find_namespace(token, status);
    if (!ns) return {status};
    std::int64_t current = 0;
    if (auto it = ns->data.find(key); it != ns->data.end() && !parse_integer(it->second, current)) {
      return {{StatusCode::failed_precondition,
               "add on key " + quoted(key) + ": its value " + quoted(it->second, 32) +
                   " is not a decimal integer (add works on keys that add created or that hold an integer)"}};
    }
    if (__builtin_add_overflow(current, delta, &sum)) {
      return {{StatusCode::failed_precondition, "add on key " + quoted(key) + ": " + std::to_string(current) +
                                                    " + " + std::to_string(delta) + " overflows a 64-bit integer"}};
    }
    if (Status stored = store_value(*ns, "add", key, std::to_string(sum), ready); !stored.ok()) return {stored};
  }
  run_all(ready);
  return {{}, sum};
}

Result<std::string> Store::compare_set(std::string_view token, std::string_view key, std::string_view expected,
                                       std::string desired) {
  if (Status status = check_key(key); !status.ok()) return {status};
  if (Status status = check_value(key, "expected value", expected.size()); !status.ok()) return {status};
  if (Status status = check_value(key, "desired value", desired.size()); !status.ok()) return {status};
  std::vector<Ready> ready;
  {
    std::lock_guard lock(mutex_);
    Status status;
    Namespace* ns = find_namespace(token, status);
    if (!ns) return {status};
    auto it = ns->data.find(key);
    if (it == ns->data.end()) {
      if (!expected.empty()) return {{}, std::string(expected)};
    } else if (it->second != expected) {
      return {{}, it->second};
    }
    if (Status stored = store_value(*ns, "compare_set", key, desired, ready); !stored.ok()) return {stored};
  }
  run_all(ready);
  return {{}, std::move(desired)};
}

Result<bool> Store::check(std::string_view token, std::span<const std::string> keys) {
  if (Status status = check_keys(keys); !status.ok()) return {status};
  std::lock_guard lock(mutex_);
  Status status;
  Namespace* ns = find_namespace(token, status);
  if (!ns) return {status};
  bool all = std::all_of(keys.begin(), keys.end(), [ns](const std::string& key) { return ns->data.contains(key); });
  return {{}, all};
}

Result<bool> Store::delete_key(std::string_view token, std::string_view key) {
  if (Status status = check_key(key); !status.ok()) return {status};
  std::lock_guard lock(mutex_);
  Status status;
  Namespace* ns = find_namespace(token, status);
  if (!ns) return {status};
  auto it = ns->data.find(key);
  if (it == ns->data.end()) return {{}, false};
  ns->bytes -= it->first.size() + it->second.size();
  ns->data.erase(it);
  return {{}, true};
}

Result<std::int64_t> Store::num_keys(std::string_view token) {
  std::lock_guard lock(mutex_);
  Status status;
  Namespace* ns = find_namespace(token, status);
  if (!ns) return {status};
  return {{}, static_cast<std::int64_t>(ns->data.size())};
}

Status Store::store_value(Namespace& ns, std::string_view operation, std::string_view key, std::string value,
                          std::vector<Ready>& ready) {
  auto it = ns.data.find(key);
  const bool is_new = it == ns.data.end();
  const std::size_t old_bytes = is_new ? 0 : key.size() + it->second.size();
  const std::size_t new_bytes = ns.bytes - old_bytes + key.size() + value.size();
  auto full = [&](const std::string& what) {
    return Status{StatusCode::resource_exhausted,
                  std::string(operation) + " on key " + quoted(key) + " refused: " + what + "; it holds " +
                      std::to_string(ns.data.size()) + " keys with " + std::to_string(ns.bytes) +
                      " bytes of keys and values now. Delete keys the job no longer needs (delete_key), or keep "
                      "large data out of the store (a shared file, with its path in the store)"};
  };
  if (is_new && ns.data.size() >= limits_.namespace_keys) {
    return full("the job's store is at its limit of " + std::to_string(limits_.namespace_keys) + " keys");
  }
  if (new_bytes > ns.bytes && new_bytes > limits_.namespace_bytes) {
    return full("it would take the job's store to " + std::to_string(new_bytes) +
                " bytes of keys and values, over its limit of " + std::to_string(limits_.namespace_bytes) +
                " bytes (" + bytes_text(limits_.namespace_bytes) + ")");
  }
  ns.bytes = new_bytes;
  if (is_new) {
    it = ns.data.emplace(std::string(key), std::move(value)).first;
  } else {
    it->second = std::move(value);
  }
  auto watching = ns.watchers.find(key);
  if (watching == ns.watchers.end()) return {};
  std::vector<WaiterId> ids = watching->second;  // take_waiter edits the list
  for (WaiterId id : ids) {
    const Waiter& waiter = waiters_.at(id);
    bool all = std::all_of(waiter.keys.begin(), waiter.keys.end(),
                           [&ns](const std::string& k) { return ns.data.contains(k); });
    if (!all) continue;
    ready.push_back(take_waiter(id, {}, waiter.is_get ? it->second : std::string()));
  }
  return {};
}

}  // namespace dtrain::store
