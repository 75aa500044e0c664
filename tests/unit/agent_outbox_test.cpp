#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "agent/session/message_batch.h"
#include "agent/session/outbox.h"

using namespace dtrain;

namespace {

// A session whose writes block until released, like a launcher that stopped reading.
class StalledStream final : public agent::SessionStream {
 public:
  bool read(v1::LauncherMessage&) override { return false; }
  bool write(const v1::AgentMessage& message) override {
    std::unique_lock lock(mutex);
    cv.wait(lock, [this] { return released; });
    written.push_back(message);
    return true;
  }
  void cancel() override {}
  std::string peer() const override { return "test"; }
  void release() {
    std::lock_guard lock(mutex);
    released = true;
    cv.notify_all();
  }
  std::mutex mutex;
  std::condition_variable cv;
  bool released = false;
  std::vector<v1::AgentMessage> written;
};

v1::AgentMessage lines(std::uint32_t rank, int count, std::size_t width) {
  v1::AgentMessage message;
  message.mutable_log_lines()->set_round(0);
  for (int i = 0; i < count; ++i) {
    auto* line = message.mutable_log_lines()->add_lines();
    line->set_rank(rank);
    line->set_text(std::string(width, 'x'));
  }
  return message;
}

}  // namespace

TEST_CASE("console lines beyond the backlog bound are dropped and counted; other events are kept") {
  StalledStream stream;
  {
    agent::Outbox outbox(stream, std::chrono::hours(1));
    // 40 MiB of lines against a 16 MiB bound, with an exit event in the middle.
    for (int i = 0; i < 40; ++i) {
      outbox.push(lines(1, 16, 64 * 1024));
      if (i == 20) {
        v1::AgentMessage exited;
        exited.mutable_worker_exited()->set_rank(1);
        exited.mutable_worker_exited()->set_exit_code(3);
        outbox.push(std::move(exited));
      }
    }
    stream.release();
    outbox.flush(std::chrono::seconds(10));
  }
  std::size_t delivered = 0;
  bool exit_seen = false;
  std::string note;
  for (const auto& m : stream.written) {
    if (m.has_worker_exited()) exit_seen = true;
    if (!m.has_log_lines()) continue;
    for (const auto& l : m.log_lines().lines()) {
      if (l.text().rfind("dtrain: ", 0) == 0) {
        note = l.text();
      } else {
        ++delivered;
      }
    }
  }
  CHECK(exit_seen);
  CHECK(delivered < 40 * 16);
  CHECK(delivered * 64 * 1024 <= agent::Outbox::kMaxQueuedLogBytes + 64 * 1024 * 16);
  CHECK(note == "dtrain: " + std::to_string(40 * 16 - delivered) +
                    " console lines were dropped because workers printed faster than the launcher could receive; "
                    "every line is in the ranks' log files");
}

TEST_CASE("consecutive log lines are merged into one message; a quiet session sends heartbeats") {
  StalledStream stream;
  {
    agent::Outbox outbox(stream, std::chrono::milliseconds(20));
    for (int i = 0; i < 5; ++i) outbox.push(lines(0, 1, 10));
    stream.release();
    outbox.flush(std::chrono::seconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  int heartbeats = 0;
  std::size_t log_messages = 0, log_lines = 0;
  for (const auto& m : stream.written) {
    if (m.has_heartbeat()) ++heartbeats;
    if (m.has_log_lines()) {
      ++log_messages;
      log_lines += static_cast<std::size_t>(m.log_lines().lines_size());
    }
  }
  CHECK(log_lines == 5);
  CHECK(log_messages < 5);
  CHECK(heartbeats >= 2);
}

TEST_CASE("what waits behind a write goes in one batch, in order; log lines stay out of batches") {
  StalledStream stream;
  {
    agent::Outbox outbox(stream, std::chrono::hours(1));
    // The first message's write blocks (the writer took it alone); the rest pile up behind it.
    v1::AgentMessage first;
    first.mutable_worker_started()->set_rank(0);
    outbox.push(first);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (std::uint32_t rank = 1; rank <= 3; ++rank) {
      v1::AgentMessage started;
      started.mutable_worker_started()->set_rank(rank);
      outbox.push(std::move(started));
    }
    outbox.push(lines(1, 2, 10));
    v1::AgentMessage done;
    done.mutable_group_done()->set_round(0);
    outbox.push(std::move(done));
    stream.release();
    outbox.flush(std::chrono::seconds(10));
  }
  REQUIRE(stream.written.size() == 4);
  CHECK(stream.written[0].worker_started().rank() == 0);
  REQUIRE(stream.written[1].has_batch());
  const auto& batch = stream.written[1].batch().messages();
  REQUIRE(batch.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(batch[i].worker_started().rank() == static_cast<std::uint32_t>(i + 1));
  CHECK(stream.written[2].log_lines().lines_size() == 2);
  CHECK(stream.written[3].has_group_done());   // alone: nothing waited behind it
}

TEST_CASE("a batch holds at most kMaxBatchMessages messages and about kMaxBatchBytes") {
  std::deque<v1::AgentMessage> queue;
  for (std::size_t i = 0; i < agent::kMaxBatchMessages + 10; ++i) {
    v1::AgentMessage m;
    m.mutable_worker_started()->set_rank(static_cast<std::uint32_t>(i));
    queue.push_back(std::move(m));
  }
  CHECK(agent::take_batch(queue).batch().messages_size() == static_cast<int>(agent::kMaxBatchMessages));
  CHECK(agent::take_batch(queue).batch().messages_size() == 10);
  // Three messages of 600 KiB: two fit under the byte bound's reach (the second crosses it), the third waits.
  for (int i = 0; i < 3; ++i) {
    v1::AgentMessage m;
    m.mutable_worker_exited()->add_stderr_tail(std::string(600 << 10, 'e'));
    queue.push_back(std::move(m));
  }
  CHECK(agent::take_batch(queue).batch().messages_size() == 2);
  const auto last = agent::take_batch(queue);
  CHECK(last.has_worker_exited());
  CHECK(queue.empty());
}

namespace {

v1::AgentMessage report(std::uint32_t rank, std::uint64_t steps_done, bool exiting = false, bool quiet = false) {
  v1::AgentMessage message;
  auto* r = message.mutable_worker_health()->mutable_report();
  r->set_rank(rank);
  r->set_steps_done(steps_done);
  r->set_step(steps_done);
  r->set_exiting(exiting);
  r->set_quiet(quiet);
  return message;
}

// The reports in one write, as (rank, steps_done).
std::vector<std::pair<std::uint32_t, std::uint64_t>> reports_in(const v1::AgentMessage& m) {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
  const auto add = [&](const v1::AgentMessage& one) {
    if (one.has_worker_health()) out.emplace_back(one.worker_health().report().rank(), one.worker_health().report().steps_done());
  };
  if (m.has_batch()) {
    for (const auto& one : m.batch().messages()) add(one);
  } else {
    add(m);
  }
  return out;
}

// Records each write with when it happened.
class TimedStream final : public agent::SessionStream {
 public:
  bool read(v1::LauncherMessage&) override { return false; }
  bool write(const v1::AgentMessage& message) override {
    std::lock_guard lock(mutex);
    written.emplace_back(std::chrono::steady_clock::now(), message);
    return true;
  }
  void cancel() override {}
  std::string peer() const override { return "test"; }
  std::vector<std::pair<std::chrono::steady_clock::time_point, v1::AgentMessage>> take() {
    std::lock_guard lock(mutex);
    return std::exchange(written, {});
  }
  std::mutex mutex;
  std::vector<std::pair<std::chrono::steady_clock::time_point, v1::AgentMessage>> written;
};

}  // namespace

TEST_CASE("health reports are coalesced: each rank's latest, one write per window; firsts and last ones go at once") {
  using namespace std::chrono_literals;
  TimedStream stream;
  agent::Outbox outbox(stream, std::chrono::hours(1));
  outbox.set_report_window(400ms);
  // A rank's first report and its first counted step go at once (the launcher's start-up check waits for them).
  for (std::uint32_t rank = 0; rank < 4; ++rank) outbox.push_report(report(rank, 0));
  for (std::uint32_t rank = 0; rank < 4; ++rank) outbox.push_report(report(rank, 1));
  std::this_thread::sleep_for(100ms);
  std::vector<std::pair<std::uint32_t, std::uint64_t>> first;
  for (const auto& [when, m] : stream.take()) {
    for (const auto& r : reports_in(m)) first.push_back(r);
  }
  // (A first report may have been replaced by its rank's first step while it waited for the write before it.)
  for (std::uint32_t rank = 0; rank < 4; ++rank) {
    CHECK(std::count(first.begin(), first.end(), std::make_pair(rank, std::uint64_t{1})) == 1);
  }
  // Then 30 reports per rank within one window: one write, each rank's latest.
  const auto began = std::chrono::steady_clock::now();
  for (std::uint64_t step = 2; step < 32; ++step) {
    for (std::uint32_t rank = 0; rank < 4; ++rank) outbox.push_report(report(rank, step));
    std::this_thread::sleep_for(2ms);
  }
  std::this_thread::sleep_for(600ms);
  auto written = stream.take();
  REQUIRE(written.size() == 1);
  CHECK(written[0].first - began >= 350ms);   // it waited for its window
  CHECK(reports_in(written[0].second) ==
        std::vector<std::pair<std::uint32_t, std::uint64_t>>{{0, 31}, {1, 31}, {2, 31}, {3, 31}});
  // Another event takes the unsent reports with it, ahead of it.
  outbox.push_report(report(1, 40));
  v1::AgentMessage exited;
  exited.mutable_worker_exited()->set_rank(3);
  outbox.push(exited);
  std::this_thread::sleep_for(100ms);
  written = stream.take();
  REQUIRE(written.size() == 1);
  REQUIRE(written[0].second.has_batch());
  CHECK(reports_in(written[0].second) == std::vector<std::pair<std::uint32_t, std::uint64_t>>{{1, 40}});
  CHECK(written[0].second.batch().messages(1).has_worker_exited());
  // A rank's last report, and one after its step count went back (a restarted worker), go at once.
  outbox.push_report(report(0, 41, /*exiting=*/true));
  outbox.push_report(report(3, 0));
  std::this_thread::sleep_for(100ms);
  std::vector<std::pair<std::uint32_t, std::uint64_t>> urgent;
  for (const auto& [when, m] : stream.take()) {
    for (const auto& r : reports_in(m)) urgent.push_back(r);
  }
  CHECK(urgent == std::vector<std::pair<std::uint32_t, std::uint64_t>>{{0, 41}, {3, 0}});
  // So does one that says quiet (its process's heartbeats stop next), alone.
  outbox.push_report(report(2, 31, /*exiting=*/false, /*quiet=*/true));
  std::this_thread::sleep_for(100ms);
  written = stream.take();
  REQUIRE(written.size() == 1);
  CHECK(reports_in(written[0].second) == std::vector<std::pair<std::uint32_t, std::uint64_t>>{{2, 31}});
  // flush() sends what waits without waiting for the window.
  outbox.push_report(report(1, 41));
  outbox.flush(std::chrono::seconds(5));
  written = stream.take();
  REQUIRE(written.size() == 1);
  CHECK(reports_in(written[0].second) == std::vector<std::pair<std::uint32_t, std::uint64_t>>{{1, 41}});
}

TEST_CASE("a report window of 0 sends each report as it arrives") {
  TimedStream stream;
  agent::Outbox outbox(stream, std::chrono::hours(1));
  for (std::uint64_t step = 0; step < 5; ++step) {
    outbox.push_report(report(0, step));
    outbox.flush(std::chrono::seconds(5));
  }
  CHECK(stream.take().size() == 5);
}
