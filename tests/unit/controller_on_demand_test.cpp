// OnDemandText, the piece the control socket and /metrics share: a reader's ask raises wanted(), a publish answers
// every reader that asked before it (and wakes the serving thread), and a reader that asked after it waits for the
// next one.

#include <doctest/doctest.h>

#include <poll.h>

#include "cli/controller/observe/on_demand.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

}  // namespace

TEST_CASE("on demand: nothing is made until a reader asks; a publish answers those who asked before it") {
  auto made = OnDemandText::create("{}");
  REQUIRE(made.ok());
  OnDemandText& text = *made.value;
  CHECK_FALSE(text.wanted());
  CHECK(*text.latest() == "{}");
  CHECK_FALSE(text.younger_than(1h));
  const auto first = text.ask();
  CHECK(text.wanted());
  CHECK(text.for_reader(first, false) == nullptr);
  CHECK_FALSE(readable(text.wake_fd()));
  text.publish("one");
  CHECK_FALSE(text.wanted());
  CHECK(readable(text.wake_fd()));
  text.clear_wake();
  CHECK_FALSE(readable(text.wake_fd()));
  REQUIRE(text.for_reader(first, false) != nullptr);
  CHECK(*text.for_reader(first, false) == "one");
  CHECK(text.younger_than(1h));
  // A reader that asks now waits for the next publish, and a reader still waiting asks again.
  const auto second = text.ask();
  CHECK(text.for_reader(second, false) == nullptr);
  CHECK(*text.for_reader(second, true) == "one");   // waited long enough: the last one
  text.publish("two");
  text.ask_again();
  CHECK(text.wanted());
  CHECK(*text.for_reader(second, false) == "two");
  CHECK(*text.latest() == "two");
}
