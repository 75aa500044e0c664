#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/deadline_guard.h"

using dtrain::DeadlineGuard;
using namespace std::chrono_literals;

TEST_CASE("deadline guard: runs its callback once the deadline passes, and says so") {
  std::atomic<int> fired{0};
  DeadlineGuard guard(50ms, [&] { ++fired; });
  CHECK_FALSE(guard.expired());
  const auto start = std::chrono::steady_clock::now();
  while (fired == 0 && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(1ms);
  CHECK(fired == 1);
  CHECK(std::chrono::steady_clock::now() - start >= 45ms);
  CHECK(guard.expired());
  std::this_thread::sleep_for(100ms);
  CHECK(fired == 1);
}

TEST_CASE("deadline guard: destroyed before its deadline, the callback never runs") {
  std::atomic<int> fired{0};
  { DeadlineGuard guard(100ms, [&] { ++fired; }); }
  std::this_thread::sleep_for(250ms);
  CHECK(fired == 0);
}

TEST_CASE("deadline guard: the destructor waits for a callback that is running") {
  std::atomic<bool> inside{false};
  std::atomic<bool> finished{false};
  {
    DeadlineGuard guard(10ms, [&] {
      inside = true;
      std::this_thread::sleep_for(200ms);
      finished = true;
    });
    while (!inside) std::this_thread::sleep_for(1ms);
  }
  CHECK(finished);
}

TEST_CASE("deadline guard: many guards fire in deadline order on one timer") {
  std::atomic<int> order{0};
  int first = -1, second = -1;
  DeadlineGuard late(120ms, [&] { second = order++; });
  DeadlineGuard early(40ms, [&] { first = order++; });
  std::this_thread::sleep_for(400ms);
  CHECK(first == 0);
  CHECK(second == 1);
}
