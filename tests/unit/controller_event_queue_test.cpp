// The launcher's event queue: order kept across the ring's growth and wrap-around, no allocation per event once it
// has grown to the backlog (counted with this binary's operator new), and its memory given back after a burst.

#include <doctest/doctest.h>

#include <cstdlib>
#include <new>

#include "cli/controller/session/event_queue.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {
thread_local bool counting = false;
thread_local long allocations = 0;
}  // namespace

// Every allocation of this test binary goes through here; only those of a counting thread are counted. (malloc's
// memory is freed with free: GCC's mismatch warning does not see that operator new is malloc here.)
#pragma GCC diagnostic push   // popped at the end of the file (unity builds join files)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  if (counting) ++allocations;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

Event report(int node, unsigned rank) {
  WorkerHealth h;
  h.rank = rank;
  h.step = 7;
  h.phase = "forward";
  Event e;
  e.kind = Event::Kind::report;
  e.node = node;
  e.report = h;
  return e;
}

std::optional<Event> take(EventQueue& q) { return q.pop(std::chrono::steady_clock::now()); }

}  // namespace

TEST_CASE("event queue: events come out in order through growth and wrap-around") {
  EventQueue q;
  unsigned next_in = 0, next_out = 0;
  // In bursts that grow the ring past its first size and wrap around it, out in smaller bites.
  for (int burst = 0; burst < 20; ++burst) {
    std::vector<Event> batch;
    for (int i = 0; i < 37 * (burst % 7 + 1); ++i) batch.push_back(report(burst, next_in++));
    q.push_all(batch);
    CHECK(batch.empty());
    for (int i = 0; i < 90; ++i) {
      auto e = take(q);
      if (!e) break;
      CHECK(std::get<WorkerHealth>(e->report).rank == next_out++);
    }
  }
  while (auto e = take(q)) CHECK(std::get<WorkerHealth>(e->report).rank == next_out++);
  CHECK(next_out == next_in);
}

TEST_CASE("event queue: once grown, an agent's batch of reports costs it no allocation") {
  EventQueue q;
  std::vector<Event> batch;
  for (int round = 0; round < 3; ++round) {
    for (unsigned r = 0; r < 8; ++r) batch.push_back(report(0, r));   // the message's own events, made before
    counting = round > 0;   // the first round grows the ring
    allocations = 0;
    q.push_all(batch);
    for (int i = 0; i < 8; ++i) REQUIRE(take(q).has_value());
    counting = false;
    if (round > 0) CHECK(allocations == 0);
  }
}

TEST_CASE("event queue: the ring gives its memory back when a burst has drained") {
  EventQueue q;
  const std::size_t burst = EventQueue::kShrinkAbove + 1000;
  for (std::size_t i = 0; i < burst; ++i) q.push(report(0, static_cast<unsigned>(i)));
  CHECK(q.capacity() > EventQueue::kShrinkAbove);
  for (std::size_t i = 0; i < burst; ++i) REQUIRE(take(q).has_value());
  CHECK(q.capacity() == EventQueue::kInitialSlots);
  CHECK_FALSE(take(q).has_value());
}

#pragma GCC diagnostic pop
