// store::Store without a server: c10d semantics, waiters, deadlines, namespaces, limits.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "agent/store/store.h"
#include "tests/unit/contains.h"

using namespace std::chrono_literals;
using dtrain::store::Result;
using dtrain::store::Status;
using dtrain::store::StatusCode;
using dtrain::store::Store;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kToken[] = "token-a";

// A pending get as a future, so tests can wait on it with a bound.
std::future<Result<std::string>> get_async(Store& store, std::string_view token, std::string_view key,
                                           std::chrono::milliseconds timeout, dtrain::store::WaiterId* id = nullptr) {
  auto promise = std::make_shared<std::promise<Result<std::string>>>();
  auto future = promise->get_future();
  auto waiter = store.get(token, key, timeout, [promise](Result<std::string> result) { promise->set_value(result); });
  if (id) *id = waiter;
  return future;
}

std::future<Status> wait_async(Store& store, std::string_view token, std::vector<std::string> keys,
                               std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  store.wait(token, keys, timeout, [promise](Status status) { promise->set_value(status); });
  return future;
}

template <class T>
bool ready(std::future<T>& future, std::chrono::milliseconds within = 0ms) {
  return future.wait_for(within) == std::future_status::ready;
}

struct Fixture {
  Store store;
  Fixture() { REQUIRE(store.open_namespace(kToken).ok()); }
};

}  // namespace

TEST_CASE_FIXTURE(Fixture, "set then get returns the value, binary-safe, and set overwrites") {
  std::string binary("a\0b\xff", 4);
  REQUIRE(store.set(kToken, "k", binary).ok());
  auto first = get_async(store, kToken, "k", 1s);
  REQUIRE(ready(first));
  CHECK(first.get().value == binary);

  REQUIRE(store.set(kToken, "k", "second").ok());
  auto second = get_async(store, kToken, "k", 1s);
  REQUIRE(ready(second));
  CHECK(second.get().value == "second");
  CHECK(store.set(kToken, "empty", "").ok());
  CHECK(store.check(kToken, std::vector<std::string>{"empty"}).value);
}

TEST_CASE_FIXTURE(Fixture, "add starts a missing key at 0, stores a decimal string, and refuses non-integers") {
  CHECK(store.add(kToken, "n", 5).value == 5);
  CHECK(store.add(kToken, "n", -7).value == -2);
  CHECK(store.add(kToken, "n", 0).value == -2);
  auto value = get_async(store, kToken, "n", 1s);
  REQUIRE(ready(value));
  CHECK(value.get().value == "-2");

  REQUIRE(store.set(kToken, "preset", "41").ok());
  CHECK(store.add(kToken, "preset", 1).value == 42);

  for (std::string bad : {"abc", "12abc", "", " 1", "1.5"}) {
    REQUIRE(store.set(kToken, "bad", bad).ok());
    Result<std::int64_t> result = store.add(kToken, "bad", 1);
    CHECK(result.status.code() == StatusCode::failed_precondition);
    CHECK(contains(result.status.message(), "not a decimal integer"));
  }

  REQUIRE(store.set(kToken, "big", std::to_string(INT64_MAX)).ok());
  Result<std::int64_t> overflow = store.add(kToken, "big", 1);
  CHECK(overflow.status.code() == StatusCode::failed_precondition);
  CHECK(contains(overflow.status.message(), "overflows"));
}

TEST_CASE_FIXTURE(Fixture, "compare_set follows c10d in all four cases") {
  SUBCASE("missing key, expected empty: stores desired and returns it") {
    CHECK(store.compare_set(kToken, "k", "", "new").value == "new");
    CHECK(store.check(kToken, std::vector<std::string>{"k"}).value);
  }
  SUBCASE("missing key, expected not empty: returns expected and stores nothing") {
    CHECK(store.compare_set(kToken, "k", "old", "new").value == "old");
    CHECK_FALSE(store.check(kToken, std::vector<std::string>{"k"}).value);
    CHECK(store.num_keys(kToken).value == 0);
  }
  SUBCASE("present key holding expected: stores desired and returns it") {
    REQUIRE(store.set(kToken, "k", "old").ok());
    CHECK(store.compare_set(kToken, "k", "old", "new").value == "new");
    auto value = get_async(store, kToken, "k", 1s);
    CHECK(value.get().value == "new");
  }
  SUBCASE("present key holding something else: returns the current value and stores nothing") {
    REQUIRE(store.set(kToken, "k", "current").ok());
    CHECK(store.compare_set(kToken, "k", "old", "new").value == "current");
    auto value = get_async(store, kToken, "k", 1s);
    CHECK(value.get().value == "current");
  }
  SUBCASE("present key holding an empty value equals an empty expected") {
    REQUIRE(store.set(kToken, "k", "").ok());
    CHECK(store.compare_set(kToken, "k", "", "new").value == "new");
  }
}

TEST_CASE_FIXTURE(Fixture, "check, delete_key and num_keys") {
  CHECK(store.check(kToken, std::vector<std::string>{}).value);
  CHECK(store.num_keys(kToken).value == 0);
  REQUIRE(store.set(kToken, "a", "1").ok());
  REQUIRE(store.set(kToken, "b", "2").ok());
  REQUIRE(store.set(kToken, "a", "3").ok());
  CHECK(store.num_keys(kToken).value == 2);
  CHECK(store.check(kToken, std::vector<std::string>{"a", "b"}).value);
  CHECK_FALSE(store.check(kToken, std::vector<std::string>{"a", "c"}).value);

  CHECK(store.delete_key(kToken, "a").value);
  CHECK_FALSE(store.delete_key(kToken, "a").value);
  CHECK_FALSE(store.check(kToken, std::vector<std::string>{"a"}).value);
  CHECK(store.num_keys(kToken).value == 1);

  auto after_delete = get_async(store, kToken, "a", 100ms);
  REQUIRE(ready(after_delete, 5s));
  CHECK(after_delete.get().status.code() == StatusCode::deadline_exceeded);
}

TEST_CASE_FIXTURE(Fixture, "a get waits for a set from another thread and receives its value") {
  auto pending = get_async(store, kToken, "late", 10s);
  CHECK_FALSE(ready(pending, 50ms));
  CHECK(store.pending_waiters() == 1);
  std::thread setter([this] { CHECK(store.set(kToken, "late", "here").ok()); });
  REQUIRE(ready(pending, 5s));
  Result<std::string> result = pending.get();
  setter.join();
  CHECK(result.ok());
  CHECK(result.value == "here");
  CHECK(store.pending_waiters() == 0);
}

TEST_CASE_FIXTURE(Fixture, "add and a successful compare_set complete waiters; a failed compare_set does not") {
  auto by_add = get_async(store, kToken, "counter", 10s);
  auto by_compare_set = get_async(store, kToken, "flag", 10s);
  CHECK(store.add(kToken, "counter", 3).value == 3);
  REQUIRE(ready(by_add, 5s));
  CHECK(by_add.get().value == "3");

  CHECK(store.compare_set(kToken, "flag", "x", "y").value == "x");
  CHECK_FALSE(ready(by_compare_set, 50ms));
  CHECK(store.compare_set(kToken, "flag", "", "y").value == "y");
  REQUIRE(ready(by_compare_set, 5s));
  CHECK(by_compare_set.get().value == "y");
}

TEST_CASE_FIXTURE(Fixture, "wait completes only when every key is present at once") {
  auto present = wait_async(store, kToken, {}, 1s);
  REQUIRE(ready(present));
  CHECK(present.get().ok());

  auto waiting = wait_async(store, kToken, {"a", "b", "a"}, 10s);
  REQUIRE(store.set(kToken, "a", "1").ok());
  CHECK_FALSE(ready(waiting, 50ms));
  REQUIRE(store.delete_key(kToken, "a").value);
  REQUIRE(store.set(kToken, "b", "2").ok());
  CHECK_FALSE(ready(waiting, 50ms));
  std::thread setter([this] { CHECK(store.set(kToken, "a", "again").ok()); });
  REQUIRE(ready(waiting, 5s));
  setter.join();
  CHECK(waiting.get().ok());
}

TEST_CASE_FIXTURE(Fixture, "timeouts fire on time, in deadline order, and name what is missing") {
  std::vector<std::pair<std::string, std::chrono::milliseconds>> order;
  std::mutex mutex;
  Clock::time_point start = Clock::now();
  auto record = [&](std::string name) {
    return [&, name](Result<std::string> result) {
      CHECK(result.status.code() == StatusCode::deadline_exceeded);
      std::lock_guard lock(mutex);
      order.emplace_back(name, std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start));
    };
  };
  store.get(kToken, "k300", 300ms, record("k300"));
  store.get(kToken, "k100", 100ms, record("k100"));
  store.get(kToken, "k200", 200ms, record("k200"));
  auto waited = wait_async(store, kToken, {"x", "y"}, 150ms);
  REQUIRE(store.set(kToken, "x", "present").ok());

  REQUIRE(ready(waited, 5s));
  Status status = waited.get();
  CHECK(status.code() == StatusCode::deadline_exceeded);
  CHECK(contains(status.message(), "still missing 'y' (1 of 2 keys) after 150 ms"));

  for (int i = 0; i < 500 && store.pending_waiters() > 0; ++i) std::this_thread::sleep_for(10ms);
  std::lock_guard lock(mutex);
  REQUIRE(order.size() == 3);
  CHECK(order[0].first == "k100");
  CHECK(order[1].first == "k200");
  CHECK(order[2].first == "k300");
  for (std::size_t i = 0; i < order.size(); ++i) {
    auto due = 100ms * static_cast<int>(i + 1);
    CHECK(order[i].second >= due);
    CHECK(order[i].second < due + 1000ms);  // generous: the machine may be busy
  }

  auto message = get_async(store, kToken, "nccl/default", 10ms);
  REQUIRE(ready(message, 5s));
  CHECK(message.get().status.message() == "no process set key 'nccl/default' within 10 ms");
}

TEST_CASE_FIXTURE(Fixture, "a timeout of 0 means the 300 s default and an hour is the most") {
  dtrain::store::WaiterId id = 0;
  auto pending = get_async(store, kToken, "k", 0ms, &id);
  CHECK_FALSE(ready(pending, 100ms));
  CHECK(store.cancel(id));
  REQUIRE(ready(pending));
  CHECK(pending.get().status.code() == StatusCode::cancelled);
  CHECK_FALSE(store.cancel(id));

  auto over = get_async(store, kToken, "k", dtrain::store::kMaxTimeout + 1ms);
  REQUIRE(ready(over));
  Status status = over.get().status;
  CHECK(status.code() == StatusCode::invalid_argument);
  CHECK(contains(status.message(), "1 hour"));

  auto negative = wait_async(store, kToken, {"k"}, -1ms);
  REQUIRE(ready(negative));
  CHECK(negative.get().code() == StatusCode::invalid_argument);
}

TEST_CASE("namespaces are isolated and tokens are checked") {
  Store store;
  REQUIRE(store.open_namespace("round-1").ok());
  REQUIRE(store.open_namespace("round-2").ok());
  CHECK(store.open_namespace("round-1").ok());  // reopening an open namespace keeps it
  CHECK(store.open_namespace("").code() == StatusCode::invalid_argument);

  REQUIRE(store.set("round-1", "k", "one").ok());
  CHECK(store.num_keys("round-1").value == 1);
  CHECK(store.num_keys("round-2").value == 0);
  CHECK_FALSE(store.check("round-2", std::vector<std::string>{"k"}).value);
  CHECK(store.add("round-2", "k", 1).value == 1);

  Status unknown = store.set("round-3", "k", "v");
  CHECK(unknown.code() == StatusCode::unauthenticated);
  CHECK(contains(unknown.message(), "matches no open round"));
  CHECK_FALSE(contains(unknown.message(), "round-1"));
  CHECK(store.num_keys("").status.code() == StatusCode::unauthenticated);
  CHECK(contains(store.num_keys("").status.message(), "no store token"));

  CHECK(store.drop_namespace("round-1"));
  CHECK_FALSE(store.drop_namespace("round-1"));
  Result<std::int64_t> ended = store.num_keys("round-1");
  CHECK(ended.status.code() == StatusCode::unauthenticated);
  CHECK(contains(ended.status.message(), "round that has ended"));

  REQUIRE(store.open_namespace("round-1").ok());
  CHECK(store.num_keys("round-1").value == 0);  // a reopened namespace starts empty
}

TEST_CASE("dropping a namespace fails its pending waiters and leaves others alone") {
  Store store;
  REQUIRE(store.open_namespace("old").ok());
  REQUIRE(store.open_namespace("new").ok());
  auto get = get_async(store, "old", "k", 30s);
  auto wait = wait_async(store, "old", {"a", "b"}, 30s);
  auto other = get_async(store, "new", "k", 30s);
  CHECK(store.pending_waiters() == 3);

  std::thread dropper([&] { CHECK(store.drop_namespace("old")); });
  REQUIRE(ready(get, 5s));
  REQUIRE(ready(wait, 5s));
  dropper.join();
  Status get_status = get.get().status;
  CHECK(get_status.code() == StatusCode::aborted);
  CHECK(contains(get_status.message(), "namespace closed (the round ended)"));
  CHECK(wait.get().code() == StatusCode::aborted);

  CHECK_FALSE(ready(other, 50ms));
  CHECK(store.pending_waiters() == 1);
  REQUIRE(store.set("new", "k", "v").ok());
  REQUIRE(ready(other, 5s));
  CHECK(other.get().value == "v");
}

TEST_CASE_FIXTURE(Fixture, "limits: key size, value size, keys per call") {
  CHECK(store.set(kToken, std::string(dtrain::store::kMaxKeyBytes, 'k'), "v").ok());
  Status long_key = store.set(kToken, std::string(dtrain::store::kMaxKeyBytes + 1, 'k'), "v");
  CHECK(long_key.code() == StatusCode::invalid_argument);
  CHECK(contains(long_key.message(), "4097 bytes; the limit is 4096 bytes (4 KiB)"));
  CHECK(store.set(kToken, "", "v").code() == StatusCode::invalid_argument);
  CHECK(store.add(kToken, "", 1).status.code() == StatusCode::invalid_argument);

  const std::size_t value_limit = store.limits().value_bytes;
  CHECK(value_limit == 16u << 20);
  CHECK(store.set(kToken, "big", std::string(value_limit, 'v')).ok());
  Status big = store.set(kToken, "big", std::string(value_limit + 1, 'v'));
  CHECK(big.code() == StatusCode::invalid_argument);
  CHECK(contains(big.message(), "16777217 bytes; the limit is 16777216 bytes (16 MiB)"));
  CHECK(store.compare_set(kToken, "big", "", std::string(value_limit + 1, 'v')).status.code() ==
        StatusCode::invalid_argument);
  REQUIRE(store.delete_key(kToken, "big").value);

  std::vector<std::string> keys;
  for (std::size_t i = 0; i < dtrain::store::kMaxKeysPerCall; ++i) keys.push_back("k" + std::to_string(i));
  CHECK(store.check(kToken, keys).ok());
  keys.push_back("one-too-many");
  Result<bool> too_many = store.check(kToken, keys);
  CHECK(too_many.status.code() == StatusCode::invalid_argument);
  CHECK(contains(too_many.status.message(), "65 keys in one call; the limit is 64"));
  auto wait = wait_async(store, kToken, keys, 1s);
  REQUIRE(ready(wait));
  CHECK(wait.get().code() == StatusCode::invalid_argument);
  CHECK(store.pending_waiters() == 0);
}

TEST_CASE("shutdown and destruction fail pending waiters") {
  std::future<Result<std::string>> pending;
  {
    Store store;
    REQUIRE(store.open_namespace(kToken).ok());
    pending = get_async(store, kToken, "k", 30s);
    CHECK_FALSE(ready(pending, 10ms));
  }
  REQUIRE(ready(pending));
  CHECK(pending.get().status.code() == StatusCode::unavailable);

  Store store;
  REQUIRE(store.open_namespace(kToken).ok());
  auto waiting = get_async(store, kToken, "k", 30s);
  store.shutdown();
  REQUIRE(ready(waiting));
  CHECK(contains(waiting.get().status.message(), "shutting down"));
  CHECK(store.set(kToken, "k", "v").code() == StatusCode::unavailable);
}

TEST_CASE_FIXTURE(Fixture, "a completion may call back into the store") {
  std::promise<Result<std::string>> chained;
  store.get(kToken, "first", 5s, [&](Result<std::string> result) {
    CHECK(result.ok());
    CHECK(store.set(kToken, "second", result.value + "+").ok());
    store.get(kToken, "second", 5s, [&](Result<std::string> second) { chained.set_value(second); });
  });
  REQUIRE(store.set(kToken, "first", "v").ok());
  auto future = chained.get_future();
  REQUIRE(ready(future, 5s));
  CHECK(future.get().value == "v+");
}

TEST_CASE_FIXTURE(Fixture, "concurrent adds from many threads are all counted and every waiter is served") {
  constexpr int kThreads = 8;
  constexpr int kAdds = 2000;
  std::vector<std::future<Status>> waits;
  for (int i = 0; i < 50; ++i) {
    waits.push_back(wait_async(store, kToken, {"done/" + std::to_string(i % kThreads)}, 30s));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < kAdds; ++i) store.add(kToken, "counter", 1);
      store.set(kToken, "done/" + std::to_string(t), "1");
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(store.add(kToken, "counter", 0).value == kThreads * kAdds);
  for (auto& wait : waits) {
    REQUIRE(ready(wait, 5s));
    CHECK(wait.get().ok());
  }
  CHECK(store.pending_waiters() == 0);
}

TEST_CASE("a namespace holds at most StoreLimits bytes and keys; set, add and compare_set all count") {
  dtrain::store::StoreLimits limits;
  limits.value_bytes = 1000;
  limits.namespace_bytes = 4000;
  limits.namespace_keys = 10;
  Store store(limits);
  REQUIRE(store.open_namespace(kToken).ok());

  // Bytes: three values of 999 bytes plus keys "v0".."v2" (2 bytes each) hold 3003 bytes; a fourth would be 4004.
  for (int i = 0; i < 3; ++i) REQUIRE(store.set(kToken, "v" + std::to_string(i), std::string(999, 'x')).ok());
  Status over = store.set(kToken, "v3", std::string(999, 'x'));
  CHECK(over.code() == StatusCode::resource_exhausted);
  CHECK(contains(over.message(), "set on key 'v3' refused"));
  CHECK(contains(over.message(), "4004 bytes of keys and values, over its limit of 4000 bytes"));
  CHECK(contains(over.message(), "it holds 3 keys with 3003 bytes"));
  CHECK(contains(over.message(), "delete_key"));
  CHECK(store.check(kToken, std::vector<std::string>{"v3"}).value == false);
  Result<std::string> swapped = store.compare_set(kToken, "v3", "", std::string(999, 'x'));
  CHECK(swapped.status.code() == StatusCode::resource_exhausted);
  CHECK(contains(swapped.status.message(), "compare_set on key 'v3' refused"));
  // Overwriting a key with a value of the same size or smaller always fits; a larger one counts the difference.
  CHECK(store.set(kToken, "v0", std::string(999, 'y')).ok());
  CHECK(store.set(kToken, "v0", std::string(10, 'y')).ok());  // 3003 - 1001 + 12 = 2014 bytes
  CHECK(store.set(kToken, "v3", std::string(999, 'x')).ok());  // 3015
  CHECK(store.set(kToken, "v0", std::string(997, 'y')).code() == StatusCode::resource_exhausted);  // 4002
  CHECK(store.set(kToken, "v0", std::string(995, 'y')).ok());  // 4000: the limit itself is allowed
  // Deleting frees room.
  REQUIRE(store.delete_key(kToken, "v3").value);
  CHECK(store.set(kToken, "v4", std::string(900, 'x')).ok());  // 3901: room for the counters below

  // Keys: 4 keys are held; add makes 6 more (the 10th fits), the 11th is refused, by add and by set alike.
  for (int i = 0; i < 6; ++i) REQUIRE(store.add(kToken, "n" + std::to_string(i), 1).ok());
  CHECK(store.num_keys(kToken).value == 10);
  Result<std::int64_t> added = store.add(kToken, "n6", 1);
  CHECK(added.status.code() == StatusCode::resource_exhausted);
  CHECK(contains(added.status.message(), "add on key 'n6' refused: the job's store is at its limit of 10 keys"));
  CHECK(store.set(kToken, "n6", "1").code() == StatusCode::resource_exhausted);
  // An existing key may still change: counters keep counting at the key limit.
  CHECK(store.add(kToken, "n0", 41).value == 42);
  CHECK(store.compare_set(kToken, "n1", "1", "2").value == "2");

  // A refused write completes no waiter, and every namespace has its own budget.
  auto pending = get_async(store, kToken, "n6", 200ms);
  CHECK(store.set(kToken, "n6", "x").code() == StatusCode::resource_exhausted);
  CHECK(!ready(pending, 50ms));
  REQUIRE(store.open_namespace("token-b").ok());
  CHECK(store.set("token-b", "n6", std::string(999, 'x')).ok());
  REQUIRE(ready(pending, 1s));
  CHECK(pending.get().status.code() == StatusCode::deadline_exceeded);
}

TEST_CASE("the value limit can be at most what fits in one message") {
  dtrain::store::StoreLimits limits;
  limits.value_bytes = dtrain::store::kMaxValueBytes + 1;
  CHECK_THROWS_AS(Store{limits}, std::invalid_argument);
}
