// LeaseWatch on a real clock: the lease runs out after the launcher's silence, a message restarts it, and time in
// which this process was stopped (a real SIGSTOP) is not the launcher's silence.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "agent/session/lease_watch.h"
#include "eventually.h"
#include "stop_self.h"

using namespace dtrain;
using namespace std::chrono_literals;

namespace {

class CountingStream final : public agent::SessionStream {
 public:
  bool read(v1::LauncherMessage&) override { return false; }
  bool write(const v1::AgentMessage&) override { return true; }
  void cancel() override { cancelled = true; }
  std::string peer() const override { return "test"; }
  std::atomic<bool> cancelled{false};
};

}  // namespace

TEST_CASE("lease: a silent launcher costs the session after the lease, not before") {
  CountingStream stream;
  const auto start = std::chrono::steady_clock::now();
  agent::LeaseWatch lease(stream, 300ms);
  REQUIRE(eventually([&] { return stream.cancelled.load(); }, 5s));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 290ms);
  CHECK(took < 1500ms);
  CHECK(lease.expired());
}

TEST_CASE("lease: a shorter lease (Configure's) holds at once, not after the default one's wait") {
  CountingStream stream;
  const auto start = std::chrono::steady_clock::now();
  agent::LeaseWatch lease(stream, 10s);
  std::this_thread::sleep_for(50ms);
  lease.set_lease(300ms);
  REQUIRE(eventually([&] { return stream.cancelled.load(); }, 5s));
  CHECK(std::chrono::steady_clock::now() - start < 1500ms);
}

TEST_CASE("lease: each message starts it again") {
  CountingStream stream;
  agent::LeaseWatch lease(stream, 300ms);
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(100ms);
    lease.heard();
  }
  CHECK_FALSE(stream.cancelled.load());
  CHECK_FALSE(lease.expired());
}

TEST_CASE("lease: an agent stopped for longer than its lease keeps it; its own running time still counts") {
  CountingStream stream;
  agent::LeaseWatch lease(stream, 400ms);
  std::this_thread::sleep_for(200ms);
  // 200 ms of silence, then the whole process stopped for 800 ms: twice what is left of the lease. On the steady
  // clock alone the lease would run out the moment the process resumes.
  stop_self_for(800ms);
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(stream.cancelled.load());
  // The launcher's messages that waited meanwhile are read: the lease starts again, and a silence afterwards still
  // ends it.
  lease.heard();
  const auto heard = std::chrono::steady_clock::now();
  REQUIRE(eventually([&] { return stream.cancelled.load(); }, 5s));
  CHECK(std::chrono::steady_clock::now() - heard >= 390ms);
}
