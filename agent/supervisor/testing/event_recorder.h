#pragma once
// Test support: records a Supervisor's events so a test thread can wait for them (with timeouts).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/supervisor/supervisor.h"

namespace dtrain::supervisor::testing {

// A worker that runs `script` with /bin/sh -c.
inline ProcessSpec shell(std::uint64_t id, const std::string& script) {
  ProcessSpec spec;
  spec.id = id;
  spec.argv = {"sh", "-c", script};
  return spec;
}

// Test binaries have no threads before main(); preparing here keeps every test file correct on its own.
inline const bool kProcessPrepared = (prepare_process(), true);

class EventRecorder {
 public:
  struct Line {
    bool is_stderr = false;
    std::string text;
  };
  struct Exit {
    ProcessExit exit;
    std::size_t lines_before = 0;                     // lines of this id delivered before its exit
    std::chrono::steady_clock::time_point seen_at;    // when `exited` ran
    std::chrono::system_clock::time_point seen_wall;  // the same, on the wall clock
  };

  Events events() {
    Events e;
    e.started = [this](std::uint64_t id, pid_t pid) {
      std::lock_guard lock(mutex_);
      started_[id] = pid;
      order_[id].push_back("started");
      changed_.notify_all();
    };
    e.line = [this](std::uint64_t id, bool is_stderr, std::string_view text) {
      std::lock_guard lock(mutex_);
      lines_[id].push_back(Line{is_stderr, std::string(text)});
      changed_.notify_all();
    };
    e.log_failed = [this](std::uint64_t id, const std::string& message) {
      std::lock_guard lock(mutex_);
      order_[id].push_back("log_failed: " + message);
      changed_.notify_all();
    };
    e.exited = [this](const ProcessExit& exit) {
      std::lock_guard lock(mutex_);
      exits_[exit.id] = Exit{exit, lines_[exit.id].size(), std::chrono::steady_clock::now(),
                             std::chrono::system_clock::now()};
      order_[exit.id].push_back("exited");
      changed_.notify_all();
    };
    return e;
  }

  std::optional<Exit> wait_exit(std::uint64_t id, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return exits_.count(id) != 0; })) return std::nullopt;
    return exits_.at(id);
  }

  std::optional<pid_t> wait_started(std::uint64_t id, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return started_.count(id) != 0; })) return std::nullopt;
    return started_.at(id);
  }

  // Waits until `id` has delivered at least `count` lines.
  bool wait_lines(std::uint64_t id, std::size_t count, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return lines_[id].size() >= count; });
  }

  std::vector<Line> lines(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    return lines_[id];
  }

  std::vector<std::string> texts(std::uint64_t id, bool is_stderr) {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& line : lines_[id]) {
      if (line.is_stderr == is_stderr) out.push_back(line.text);
    }
    return out;
  }

  // "started"/"exited" in the order they happened for `id`.
  std::vector<std::string> order(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    return order_[id];
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::uint64_t, pid_t> started_;
  std::map<std::uint64_t, std::vector<Line>> lines_;
  std::map<std::uint64_t, Exit> exits_;
  std::map<std::uint64_t, std::vector<std::string>> order_;
};

// Waits for a stop_all's done on the test thread.
class StopWaiter {
 public:
  std::function<void(unsigned)> callback() {
    return [this](unsigned sigkilled) {
      std::lock_guard lock(mutex_);
      results_.push_back(sigkilled);
      done_.notify_all();
    };
  }
  // The sigkilled counts of the callbacks that ran, once `count` of them did (nullopt on timeout).
  std::optional<std::vector<unsigned>> wait(std::size_t count = 1,
                                            std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock lock(mutex_);
    if (!done_.wait_for(lock, timeout, [&] { return results_.size() >= count; })) return std::nullopt;
    return results_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<unsigned> results_;
};

}  // namespace dtrain::supervisor::testing
