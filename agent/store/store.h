#pragma once

// The job's key-value store with the semantics of PyTorch's c10d Store (HashStore/TCPStore), hosted by node 0's
// agent. One Store holds many namespaces; a namespace is selected by its token, and each restart round of a job
// opens a fresh one, so a round never sees an earlier round's keys.
//
// Blocking operations (get, wait) never hold a thread: they register a waiter whose callback runs once, when
// the keys appear, when the deadline passes, when the namespace is dropped, or when the caller cancels it. One
// timer thread fires deadlines in order. No gRPC here: agent/service/store_service.cpp adapts this to the wire.
//
// Limits on one request (worker/store/limits.h, shared with the clients; a request over one fails with
// invalid_argument naming it):
//   key <= 4 KiB and not empty, value <= StoreLimits::value_bytes (16 MiB by default, never over 64 MiB),
//   <= 64 keys per check/wait, timeout: 0 means the default of 300 s (c10d's default store timeout), at most 1 hour.
// Limits on one namespace (a set, add or compare_set that would pass one fails with resource_exhausted, naming the
// limit and what the namespace holds): StoreLimits::namespace_bytes of keys plus values and StoreLimits::
// namespace_keys keys. Without them any holder of a round's token could grow node 0's agent until the kernel kills
// it; with them one round costs the agent at most about namespace_bytes plus ~150 bytes of bookkeeping per key.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/store/limits.h"

namespace dtrain::store {

// How much one namespace (one round of one job) may hold. The defaults leave room for what rendezvous needs at
// scale: an NCCL unique id is 128 bytes per communicator; c10d's barriers and counters are a few short keys per
// process group; Gloo's full-mesh rendezvous is the big one, one key per rank holding a 136-byte address per peer,
// so 136 * N^2 bytes for a group of N ranks (N = 1024: 142 MB; N = 512: 36 MB).
struct StoreLimits {
  // One value (set, and compare_set's expected and desired). At most kMaxValueBytes.
  std::size_t value_bytes = 16 * 1024 * 1024;
  // The sum of key and value sizes in one namespace.
  std::size_t namespace_bytes = 256 * 1024 * 1024;
  // Keys in one namespace (bounds the per-key bookkeeping that namespace_bytes does not count).
  std::size_t namespace_keys = 131'072;
};

// Failures use dtrain's Status (common/status.h). The codes a store returns:
//   invalid_argument     a limit or an empty key
//   unauthenticated      the token names no open namespace
//   deadline_exceeded    a get/wait timed out
//   aborted              the namespace was dropped while a get/wait was pending (the round ended)
//   failed_precondition  add on a value that is not an integer, or an add that would overflow
//   cancelled            the caller cancelled a pending get/wait
//   unavailable          the store is shutting down
//   resource_exhausted   the namespace is full (StoreLimits::namespace_bytes or namespace_keys); deleting keys
//                        makes room again
using dtrain::Result;
using dtrain::Status;
using dtrain::StatusCode;

// Identifies a pending get/wait for cancel(); kNoWaiter when the call completed (or failed) before returning.
using WaiterId = std::uint64_t;
inline constexpr WaiterId kNoWaiter = 0;

// Completion callbacks run exactly once, never under the store's lock (so they may call into the store), on the
// thread that completed them: the caller's own thread when the call completes at once, the thread of the set/add/
// compare_set/drop_namespace/cancel that completed it, or the timer thread. They must not block.
using GetCallback = std::function<void(Result<std::string>)>;
using WaitCallback = std::function<void(Status)>;

// Thread-safe: any method may be called from any thread, including from a completion callback.
class Store {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Store(StoreLimits limits = {});
  // Fails every pending waiter (unavailable), then stops the timer thread.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Opens the namespace of a round. Opening an open token is a no-op; the token must not be empty.
  Status open_namespace(std::string token);
  // Drops a namespace and its keys; its pending waiters fail with aborted ("namespace closed (the round ended)").
  // Returns false if the token named no open namespace.
  bool drop_namespace(std::string_view token);
  // Fails every pending waiter (unavailable) and refuses every later call; for an orderly server shutdown.
  void shutdown();

  Status set(std::string_view token, std::string_view key, std::string value);
  // Adds delta to the decimal integer stored under key (a missing key counts as 0) and returns the sum, which is
  // stored as its decimal string, as c10d does. A value that is not an integer fails with failed_precondition.
  Result<std::int64_t> add(std::string_view token, std::string_view key, std::int64_t delta);
  // c10d compareSet. Missing key: with expected empty, stores desired and returns it; otherwise returns expected
  // and stores nothing. Present key: if it holds expected, stores desired and returns it; else returns the
  // current value.
  Result<std::string> compare_set(std::string_view token, std::string_view key, std::string_view expected,
                                  std::string desired);
  // Whether every key is present now (true for an empty list).
  Result<bool> check(std::string_view token, std::span<const std::string> keys);
  // Whether the key existed.
  Result<bool> delete_key(std::string_view token, std::string_view key);
  // The number of keys in the namespace.
  Result<std::int64_t> num_keys(std::string_view token);

  // Completes with the key's value once it exists. timeout 0 means kDefaultTimeout.
  WaiterId get(std::string_view token, std::string_view key, std::chrono::milliseconds timeout, GetCallback done);
  // Completes once every key exists at the same moment. timeout 0 means kDefaultTimeout.
  WaiterId wait(std::string_view token, std::span<const std::string> keys, std::chrono::milliseconds timeout,
                WaitCallback done);
  // Completes a pending waiter with cancelled. Returns false if it had already completed.
  bool cancel(WaiterId id);
  // How many get/wait calls are pending, in all namespaces (for status views and tests).
  std::size_t pending_waiters() const;
  const StoreLimits& limits() const { return limits_; }

 private:
  struct Namespace {
    std::map<std::string, std::string, std::less<>> data;
    std::size_t bytes = 0;  // sum of key and value sizes in data, held under StoreLimits::namespace_bytes
    // key -> the pending waiters that need it.
    std::map<std::string, std::vector<WaiterId>, std::less<>> watchers;
    std::set<WaiterId> waiters;
  };
  struct Waiter {
    Namespace* ns = nullptr;
    std::vector<std::string> keys;  // distinct; get has exactly one
    bool is_get = false;
    std::chrono::milliseconds timeout{};
    Clock::time_point deadline;
    std::function<void(Status, std::string)> done;
  };
  // A completion to run once the lock is released.
  using Ready = std::function<void()>;

  // store.cpp: namespaces, the limits on requests and on what a namespace holds.
  Namespace* find_namespace(std::string_view token, Status& status);
  Status check_key(std::string_view key) const;
  Status check_keys(std::span<const std::string> keys) const;
  Result<Clock::duration> check_timeout(std::chrono::milliseconds timeout) const;
  // Stores a value and collects the waiters it completes; stores nothing and fails with resource_exhausted when
  // the namespace would pass a StoreLimits bound.
  Status store_value(Namespace& ns, std::string_view operation, std::string_view key, std::string value,
                     std::vector<Ready>& ready);
  Status check_value(std::string_view key, std::string_view what, std::size_t size) const;
  // store_waiters.cpp: pending get/wait calls and their deadlines.
  WaiterId add_waiter(std::string_view token, std::vector<std::string> keys, bool is_get,
                      std::chrono::milliseconds timeout, std::function<void(Status, std::string)> done);
  // Removes a waiter from every index and returns its completion bound to the given outcome.
  Ready take_waiter(WaiterId id, Status status, std::string value = {});
  std::string timeout_message(const Waiter& waiter) const;
  void timer_loop();
  // Runs completions collected under the lock, after it was released.
  static void run_all(std::vector<Ready>& ready);

  const StoreLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable timer_wakeup_;
  bool stopping_ = false;
  bool shut_down_ = false;
  WaiterId next_waiter_ = 1;
  std::map<std::string, std::unique_ptr<Namespace>, std::less<>> namespaces_;
  // Tokens of recently dropped namespaces, only to tell a late worker that its round ended (bounded).
  std::deque<std::string> closed_tokens_;
  std::unordered_map<WaiterId, Waiter> waiters_;
  std::set<std::pair<Clock::time_point, WaiterId>> deadlines_;
  std::thread timer_;
};

}  // namespace dtrain::store
