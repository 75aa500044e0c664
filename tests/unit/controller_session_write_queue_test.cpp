// SessionWriteQueue: one write in flight, in order, and the two bounds that give up an agent that does not read.

#include <doctest/doctest.h>

#include <string>

#include "cli/controller/transport/session_write_queue.h"

using namespace dtrain::controller;
using Queue = SessionWriteQueue<std::string>;
using std::chrono::milliseconds;

TEST_CASE("session write queue: the first message starts a write, later ones wait their turn in order") {
  Queue q(8, milliseconds(1000));
  const auto t = Queue::Clock::now();
  CHECK(q.push("a", t) == Queue::Push::start_write);
  CHECK(q.push("b", t) == Queue::Push::queued);
  CHECK(q.push("c", t) == Queue::Push::queued);
  CHECK(q.front() == "a");
  CHECK(q.written());
  CHECK(q.front() == "b");
  CHECK(q.written());
  CHECK(q.front() == "c");
  CHECK_FALSE(q.written());
  CHECK_FALSE(q.writing());
  // Idle again: the next message starts a write of its own.
  CHECK(q.push("d", t) == Queue::Push::start_write);
}

TEST_CASE("session write queue: a front message older than the stall timeout refuses every later push") {
  Queue q(8, milliseconds(1000));
  const auto t = Queue::Clock::now();
  CHECK(q.push("a", t) == Queue::Push::start_write);
  CHECK(q.push("b", t + milliseconds(999)) == Queue::Push::queued);
  CHECK_FALSE(q.stalled(t + milliseconds(1000)));
  CHECK(q.stalled(t + milliseconds(1001)));
  CHECK(q.push("c", t + milliseconds(1001)) == Queue::Push::stalled);
  CHECK(q.size() == 2);
  // The stall is about the oldest message: once it is written, the next one's age counts.
  CHECK(q.written());
  CHECK_FALSE(q.stalled(t + milliseconds(1500)));
}

TEST_CASE("session write queue: a full queue refuses, an emptied one never stalls") {
  Queue q(3, milliseconds(1000));
  const auto t = Queue::Clock::now();
  CHECK(q.push("a", t) == Queue::Push::start_write);
  CHECK(q.push("b", t) == Queue::Push::queued);
  CHECK(q.push("c", t) == Queue::Push::queued);
  CHECK(q.push("d", t) == Queue::Push::full);
  while (q.written()) {
  }
  CHECK_FALSE(q.stalled(t + milliseconds(60000)));
}

TEST_CASE("session write queue: dropping the waiting messages keeps the one in flight in place") {
  Queue q(8, milliseconds(1000));
  const auto t = Queue::Clock::now();
  q.push("a", t);
  const std::string* in_flight = &q.front();
  q.push("b", t);
  q.push("c", t);
  q.drop_waiting();
  CHECK(q.size() == 1);
  CHECK(&q.front() == in_flight);
  CHECK(q.writing());
  CHECK_FALSE(q.written());
}
