#include <doctest/doctest.h>

#include "cli/report/model/samples.h"

using namespace dtrain::report;

namespace {

RankSample report(unsigned rank, std::uint64_t step, double step_ms, double data = 0) {
  RankSample s;
  s.rank = rank;
  s.step = step;
  s.step_ms = step_ms;
  s.data_wait_ms = data;
  s.loss = 2.345678;
  s.tokens_per_s = 1000;
  s.rss_bytes = std::uint64_t{300} << 20;
  return s;
}

}  // namespace

TEST_CASE("the samples window grows with the job's age, never below a second") {
  CHECK(window_length(0) == kMinWindowMs);
  CHECK(window_length(60'000) == kMinWindowMs);
  CHECK(window_length(3'600'000) == 36'000);
  CHECK(window_length(86'400'000) == 864'000);
}

TEST_CASE("a window is written once it is long enough, with each rank's means over its new steps") {
  SampleRecorder recorder(1'000'000);
  recorder.add(report(1, 1, 100, 10));
  recorder.add(report(1, 1, 100, 10));   // a heartbeat: the same step again is not a new step
  recorder.add(report(1, 2, 200, 30));
  recorder.add(report(0, 5, 50));
  CHECK_FALSE(recorder.take(0, 1'000'500, false).has_value());   // half a window
  const auto fields = recorder.take(3, 1'001'000, false);
  REQUIRE(fields.has_value());
  CHECK((*fields)["round"] == 3);
  CHECK((*fields)["window_ms"] == 1000);
  CHECK((*fields)["rank"] == nlohmann::ordered_json::array({0, 1}));
  CHECK((*fields)["step"] == nlohmann::ordered_json::array({5, 2}));
  CHECK((*fields)["step_ms"][1] == 150.0);
  CHECK((*fields)["data_wait_ms"][1] == 20.0);
  CHECK((*fields)["loss"][0] == 2.346);
  CHECK((*fields)["rss_mib"][0] == 300);
  // The next window is empty until a rank makes a new step; a repeated step stays no step.
  recorder.add(report(1, 2, 200));
  CHECK_FALSE(recorder.take(3, 1'003'000, true).has_value());
}

TEST_CASE("a forced window closes early, and what is written reads back") {
  SampleRecorder recorder(0);
  recorder.add(report(7, 9, 80, 8));
  const auto fields = recorder.take(1, 300, true);
  REQUIRE(fields.has_value());
  nlohmann::ordered_json event = {{"ts", 300}, {"event", "samples"}};
  for (const auto& [key, value] : fields->items()) event[key] = value;
  const SampleWindow window = read_samples(event.dump());
  CHECK(window.end_ms == 300);
  CHECK(window.length_ms == 300);
  CHECK(window.round == 1);
  REQUIRE(window.ranks.size() == 1);
  CHECK(window.ranks[0].rank == 7);
  CHECK(window.ranks[0].step == 9);
  CHECK(window.ranks[0].step_ms == 80.0);
  CHECK(window.ranks[0].data_wait_ms == 8.0);
  CHECK(window.ranks[0].rss_bytes == std::uint64_t{300} << 20);
}

TEST_CASE("a samples event with short or missing columns reads as zeros, not garbage") {
  const SampleWindow window =
      read_samples(R"({"ts":5,"event":"samples","rank":[0,1],"step":[3],"step_ms":"x","loss":[1,"y"]})");
  REQUIRE(window.ranks.size() == 2);
  CHECK(window.ranks[0].step == 3);
  CHECK(window.ranks[1].rank == 1);
  CHECK(window.ranks[1].step == 0);
  CHECK(window.ranks[0].step_ms == 0);
  CHECK(window.ranks[0].loss == 1);
  CHECK(window.ranks[1].loss == 0);
  CHECK(window.end_ms == 5);
}

TEST_CASE("merging windows: neighbours of one round become one, with mean times, the later step and peak memory") {
  RankSample early = report(0, 10, 100, 4);
  early.rss_bytes = std::uint64_t{500} << 20;
  RankSample late = report(0, 20, 200, 8);
  std::vector<SampleWindow> windows{{2000, 1000, 0, {early, report(1, 10, 50)}, {}},
                                    {3000, 1000, 0, {late}, {}},
                                    {4000, 1000, 1, {report(0, 1, 10)}, {}}};
  merge_pairs(windows);
  REQUIRE(windows.size() == 2);
  CHECK(windows[0].end_ms == 3000);
  CHECK(windows[0].length_ms == 2000);
  REQUIRE(windows[0].ranks.size() == 2);
  CHECK(windows[0].ranks[0].step == 20);
  CHECK(windows[0].ranks[0].step_ms == 150);
  CHECK(windows[0].ranks[0].data_wait_ms == 6);
  CHECK(windows[0].ranks[0].rss_bytes == std::uint64_t{500} << 20);
  CHECK(windows[0].ranks[1].step_ms == 50);  // only in the earlier window: kept as it was
  // A window of another round is never merged into this round's.
  CHECK(windows[1].round == 1);
  CHECK(windows[1].ranks[0].step == 1);
}

TEST_CASE("a samples line names at most kMaxSampleRanks ranks") {
  std::string ranks;
  for (std::size_t i = 0; i < kMaxSampleRanks + 10; ++i) ranks += (i ? "," : "") + std::to_string(i % 7);
  const SampleWindow window = read_samples(R"({"ts":5,"event":"samples","rank":[)" + ranks + "]}");
  CHECK(window.ranks.size() == kMaxSampleRanks);
}
