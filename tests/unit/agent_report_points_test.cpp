// A worker's per-step points on their way through the agent: the health socket's JSON ("points"), and the outbox,
// which merges the points of the reports it coalesces instead of losing all but the last one's.

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "agent/health/report_values.h"
#include "agent/service/health_socket.h"
#include "agent/session/outbox.h"
#include "common/report/report_fields.h"

namespace agent_report_points_test {

using namespace dtrain;

Result<agent::HealthDatagram> parse(const std::string& points) {
  return agent::parse_health_datagram(R"({"rank":1,"token":"t","report_token":"r","step":3,"points":)" + points +
                                      "}");
}

TEST_CASE("the health socket takes points as [step, loss, step_ms, tokens_per_s] lists, and refuses other shapes") {
  const auto parsed = parse("[[1, 2.5, 90.25, 5000], [2, 2.4, 91, 5100.5], [3, -0.1, 0, 0]]");
  REQUIRE(parsed.ok());
  CHECK(points_of(parsed.value.report) ==
        std::vector<StepPoint>{{1, 2.5, 90.25, 5000}, {2, 2.4, 91, 5100.5}, {3, -0.1, 0, 0}});
  CHECK(agent::check_report_values(parsed.value.report).ok());
  const auto none = agent::parse_health_datagram(R"({"rank":1,"token":"t","report_token":"r"})");
  REQUIRE(none.ok());
  CHECK(none.value.report.points_size() == 0);

  for (const char* wrong : {R"("steps")", "[1, 2, 3, 4]", "[[1, 2, 3]]", "[[1, 2, 3, 4, 5]]", R"([[1, "2", 3, 4]])",
                            "[[-1, 2, 3, 4]]", "[[1.5, 2, 3, 4]]", "[{\"step\": 1}]"}) {
    CAPTURE(wrong);
    const auto refused = parse(wrong);
    REQUIRE(!refused.ok());
    CHECK(refused.status.message().find("points") != std::string::npos);
  }
  std::string too_many = "[";
  for (int i = 1; i <= 65; ++i) too_many += (i > 1 ? "," : "") + std::string("[") + std::to_string(i) + ",1,1,1]";
  const auto refused = parse(too_many + "]");
  REQUIRE(!refused.ok());
  CHECK(refused.status.message().find("at most 64") != std::string::npos);
  // Values of the right shape that cannot be real are the value checks' to refuse.
  const auto negative = parse("[[1, 2, -5, 4]]");
  REQUIRE(negative.ok());
  CHECK(agent::check_report_values(negative.value.report).message().find("step_ms is -5") != std::string::npos);
}

TEST_CASE("64 points with every number written out in full (as Python's json writes floats) fit in a datagram") {
  std::string points = "[";
  for (int i = 0; i < 64; ++i) {
    char one[160];
    std::snprintf(one, sizeof one, "%s[%d, 2.3456789012345678, 95.234567890123456, 51200.123456789012]",
                  i > 0 ? ", " : "", 1000000000 + i);
    points += one;
  }
  points += "]";
  const std::string datagram = R"({"rank": 1023, "token": ")" + std::string(64, 'a') + R"(", "report_token": ")" +
                               std::string(64, 'b') + R"(", "phase": ")" + std::string(128, 'p') +
                               R"(", "step": 1000000063, "points": )" + points + "}";
  CHECK(datagram.size() <= agent::kMaxHealthDatagram);
  const auto parsed = agent::parse_health_datagram(datagram);
  REQUIRE(parsed.ok());
  CHECK(parsed.value.report.points_size() == 64);
}

v1::AgentMessage report(std::uint32_t rank, std::uint64_t first, std::uint64_t last) {
  v1::AgentMessage message;
  auto* r = message.mutable_worker_health()->mutable_report();
  r->set_rank(rank);
  r->set_steps_done(last);
  r->set_step(last);
  std::vector<StepPoint> points;
  for (std::uint64_t s = first; s <= last; ++s) points.push_back({s, 10.0 / static_cast<double>(s), 50, 1000});
  set_points(*r, points);
  return message;
}

// Records each write.
class Recorder final : public agent::SessionStream {
 public:
  bool read(v1::LauncherMessage&) override { return false; }
  bool write(const v1::AgentMessage& message) override {
    std::lock_guard lock(mutex);
    if (message.has_batch()) {
      for (const auto& one : message.batch().messages()) add(one);
    } else {
      add(message);
    }
    return true;
  }
  void cancel() override {}
  std::string peer() const override { return "test"; }
  std::vector<v1::WorkerReport> take() {
    std::lock_guard lock(mutex);
    return std::exchange(reports, {});
  }

 private:
  void add(const v1::AgentMessage& one) {
    if (one.has_worker_health()) reports.push_back(one.worker_health().report());
  }
  std::mutex mutex;
  std::vector<v1::WorkerReport> reports;
};

TEST_CASE("coalesced reports carry the points of every report they replaced, oldest first, bounded") {
  using namespace std::chrono_literals;
  Recorder stream;
  agent::Outbox outbox(stream, std::chrono::hours(1));
  outbox.set_report_window(300ms);
  outbox.push_report(report(0, 1, 1));   // the first report and first step go at once
  std::this_thread::sleep_for(100ms);
  REQUIRE(stream.take().size() == 1);
  // 29 reports of a step each within one window: one write, all 29 points.
  for (std::uint64_t step = 2; step <= 30; ++step) outbox.push_report(report(0, step, step));
  outbox.flush(std::chrono::seconds(5));
  auto written = stream.take();
  REQUIRE(written.size() == 1);
  std::vector<StepPoint> points = points_of(written[0]);
  REQUIRE(points.size() == 29);
  CHECK(points.front().step == 2);
  CHECK(points.back().step == 30);
  // 200 steps in reports of 4 points each: bounded, the first and last kept.
  for (std::uint64_t step = 31; step <= 230; step += 4) outbox.push_report(report(0, step, step + 3));
  outbox.flush(std::chrono::seconds(5));
  written = stream.take();
  REQUIRE(written.size() == 1);
  points = points_of(written[0]);
  CHECK(points.size() <= kMaxStepPoints);
  CHECK(points.front().step == 31);
  CHECK(points.back().step == 230);
  CHECK(agent::check_report_values(written[0]).ok());
}

TEST_CASE("carry_points: a resent step is the newer report's; a report without points keeps the unsent ones") {
  v1::AgentMessage newer = report(0, 5, 8);
  agent::carry_points(report(0, 1, 6), newer);
  std::vector<StepPoint> points = points_of(newer.worker_health().report());
  REQUIRE(points.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) CHECK(points[i].step == i + 1);
  v1::AgentMessage heartbeat = report(0, 9, 8);   // no points
  agent::carry_points(newer, heartbeat);
  CHECK(heartbeat.worker_health().report().points_size() == 8);
}

}  // namespace agent_report_points_test
