#include <doctest/doctest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

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
