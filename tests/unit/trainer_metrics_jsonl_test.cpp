// The --metrics JSONL file: one parseable object per step, and a resumed run's repeated steps replace the old ones.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "trainer/metrics/jsonl.h"

using namespace dtrain::trainer;

namespace {

// A step's metrics with only the keys every line has.
StepMetrics metrics(std::uint64_t step, double loss) {
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.lr = 0.1;
  m.grad_norm = 0.5;
  m.tokens_per_s = 10;
  m.step_ms = 1;
  return m;
}

}  // namespace

TEST_CASE("a step is one JSON object with the documented keys") {
  StepMetrics m;
  m.step = 3;
  m.loss = 5.25;
  m.lr = 6e-4;
  m.grad_norm = 1.5;
  m.tokens_per_s = 1000;
  m.step_ms = 12.5;
  CHECK(to_json(m) ==
        "{\"step\": 3, \"loss\": 5.25, \"lr\": 0.0006, \"grad_norm\": 1.5, \"tokens_per_s\": 1000, \"step_ms\": 12.5}");
  m.comm_hidden = 0.875;
  m.loss = std::nan("");
  CHECK(to_json(m) == "{\"step\": 3, \"loss\": null, \"lr\": 0.0006, \"grad_norm\": 1.5, \"tokens_per_s\": 1000, "
                      "\"step_ms\": 12.5, \"comm_hidden\": 0.875}");
}

TEST_CASE("the writer appends lines; drop_metrics_after keeps steps up to a checkpoint") {
  char pattern[] = "/tmp/trainer-metrics-XXXXXX";
  std::string dir = ::mkdtemp(pattern);
  std::string path = dir + "/m.jsonl";
  {
    MetricsWriter writer(path);
    for (std::uint64_t s = 1; s <= 12; ++s) writer.write(metrics(s, 1.0));
  }
  drop_metrics_after(path, 10);
  {
    MetricsWriter writer(path);
    writer.write(metrics(11, 2.0));
  }
  std::ifstream in(path);
  std::string line;
  int count = 0;
  while (std::getline(in, line)) {
    ++count;
    CHECK(line.find("{\"step\": " + std::to_string(count) + ",") == 0);
  }
  CHECK(count == 11);
  drop_metrics_after(dir + "/missing.jsonl", 3);
  CHECK(!std::filesystem::exists(dir + "/missing.jsonl"));
  CHECK_THROWS_WITH_AS(MetricsWriter(dir + "/no/such/m.jsonl"), doctest::Contains("--metrics"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("comm_bytes, and fp16's loss_scale and skipped, follow the sharding keys when set") {
  StepMetrics m;
  m.step = 3;
  m.comm_bytes = 875520;
  m.loss_scale = 32768;
  m.skipped = true;
  const std::string line = to_json(m);
  CHECK(line.find(", \"comm_bytes\": 875520, \"loss_scale\": 32768, \"skipped\": true}") != std::string::npos);
  m.skipped = false;
  CHECK(to_json(m).find("\"skipped\": false}") != std::string::npos);
  CHECK(to_json(StepMetrics{}).find("skipped") == std::string::npos);
}

TEST_CASE("comm_ms and comm_exposed_ms follow comm_hidden when set") {
  StepMetrics m;
  m.step = 2;
  m.comm_hidden = 0.75;
  m.comm_ms = 8;
  m.comm_exposed_ms = 2;
  CHECK(to_json(m) == "{\"step\": 2, \"loss\": 0, \"lr\": 0, \"grad_norm\": 0, \"tokens_per_s\": 0, \"step_ms\": 0, "
                      "\"comm_hidden\": 0.75, \"comm_ms\": 8, \"comm_exposed_ms\": 2}");
}
