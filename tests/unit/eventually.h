#pragma once
// Test support: wait for a condition about something outside the test's control (other processes, a server's
// threads), polling, with a bound.

#include <chrono>
#include <thread>

// Polls `condition` every millisecond until it holds (true) or `timeout` passed (false, after one last look).
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return condition();
}
