#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cli/controller/diagnose/diagnosis.h"
#include "cli/controller/observe/job_metrics.h"
#include "cli/controller/observe/job_status.h"
#include "cli/controller/observe/prometheus_text.h"

using namespace dtrain::controller;

namespace {

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("label values escape backslash, double quote and newline; nothing else") {
  CHECK(escape_label_value("plain-host_1.example") == "plain-host_1.example");
  CHECK(escape_label_value("a\"b") == "a\\\"b");
  CHECK(escape_label_value("C:\\path") == "C:\\\\path");
  CHECK(escape_label_value("two\nlines") == "two\\nlines");
  CHECK(escape_label_value("\\\"\n") == "\\\\\\\"\\n");
  CHECK(escape_label_value("tab\tand \xc3\xa9") == "tab\tand \xc3\xa9");
  // HELP escapes backslash and newline, and leaves quotes alone.
  CHECK(escape_help("a \"quoted\" \\ help\nline") == "a \"quoted\" \\\\ help\\nline");
}

TEST_CASE("sample values: NaN, +Inf and -Inf as Prometheus spells them, numbers in their shortest exact form") {
  CHECK(format_sample_value(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  CHECK(format_sample_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_sample_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_sample_value(0) == "0");
  CHECK(format_sample_value(41) == "41");
  CHECK(format_sample_value(0.1) == "0.1");
  CHECK(format_sample_value(-2.5) == "-2.5");
  CHECK(format_sample_value(9007199254740992.0) == "9007199254740992");
  CHECK(std::stod(format_sample_value(1e300)) == 1e300);
  CHECK(std::stod(format_sample_value(1.0 / 3)) == 1.0 / 3);
}

TEST_CASE("one HELP and one TYPE per family, before its samples, one sample per line") {
  const std::vector<MetricFamily> families = {
      {"dtrain_a", "First\nfamily.", MetricFamily::Type::gauge,
       {{{{"job", "j"}, {"rank", "0"}}, 1}, {{{"job", "j"}, {"rank", "1"}}, 2.5}, {{{"job", "j\"x"}}, 3}}},
      {"dtrain_b_total", "Second.", MetricFamily::Type::counter, {{{}, 7}}},
      {"dtrain_empty", "No samples yet.", MetricFamily::Type::gauge, {}},
  };
  CHECK(format_prometheus(families) ==
        "# HELP dtrain_a First\\nfamily.\n"
        "# TYPE dtrain_a gauge\n"
        "dtrain_a{job=\"j\",rank=\"0\"} 1\n"
        "dtrain_a{job=\"j\",rank=\"1\"} 2.5\n"
        "dtrain_a{job=\"j\\\"x\"} 3\n"
        "# HELP dtrain_b_total Second.\n"
        "# TYPE dtrain_b_total counter\n"
        "dtrain_b_total 7\n"
        "# HELP dtrain_empty No samples yet.\n"
        "# TYPE dtrain_empty gauge\n");
}

TEST_CASE("a metric or label name the format does not allow is a programming error") {
  CHECK_THROWS_AS(format_prometheus({{"dtrain-bad", "h", MetricFamily::Type::gauge, {}}}), std::invalid_argument);
  CHECK_THROWS_AS(format_prometheus({{"9lives", "h", MetricFamily::Type::gauge, {}}}), std::invalid_argument);
  CHECK_THROWS_AS(format_prometheus({{"", "h", MetricFamily::Type::gauge, {}}}), std::invalid_argument);
  CHECK_THROWS_AS(format_prometheus({{"ok", "h", MetricFamily::Type::gauge, {{{{"bad label", "v"}}, 1}}}}),
                  std::invalid_argument);
  CHECK_THROWS_AS(format_prometheus({{"ok", "h", MetricFamily::Type::gauge, {{{{"a:b", "v"}}, 1}}}}),
                  std::invalid_argument);
  CHECK_THROWS_AS(format_prometheus({{"ok", "h", MetricFamily::Type::gauge, {{{{"__name__", "v"}}, 1}}}}),
                  std::invalid_argument);
  CHECK_NOTHROW(format_prometheus({{"ns:sub_total", "h", MetricFamily::Type::counter, {{{{"_x9", "v"}}, 1}}}}));
}

TEST_CASE("the job's metrics are the status snapshot's numbers: reported ranks, restarts, nodes up") {
  dtrain::spec::Plan plan;
  for (unsigned rank = 0; rank < 4; ++rank) {
    dtrain::spec::WorkerPlan w;
    w.rank = rank;
    w.node_rank = rank / 2;
    w.host = rank < 2 ? "node-a" : "node-b";
    plan.workers.push_back(w);
  }
  JobStatus status("job \"q\"\\x");
  status.round_started(2, plan);
  status.started(WorkerStarted{2, 0, 100});
  WorkerHealth h;
  h.rank = 0;
  h.step = 41;
  h.step_ms = 250;
  h.tokens_per_s = 1234.5;
  h.samples_per_s = 2.5;
  h.rss_bytes = 100u << 20;
  h.device_mem_peak_bytes = std::uint64_t{5} << 30;
  status.reported(h, 1000);
  status.node_lost(1);
  Diagnoser diagnoser(1.2);
  const std::string text = format_prometheus(job_metrics(status.snapshot("running", diagnoser, 2000)));
  const std::string labels = "{job=\"job \\\"q\\\"\\\\x\",rank=\"0\",node=\"0\"}";
  CHECK(text.find("dtrain_worker_step" + labels + " 41\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_step_seconds" + labels + " 0.25\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_tokens_per_second" + labels + " 1234.5\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_data_wait_ratio" + labels + " 0\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_comm_exposed_ratio" + labels + " 0\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_rss_bytes" + labels + " 104857600\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_samples_per_second" + labels + " 2.5\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_device_mem_peak_bytes" + labels + " 5368709120\n") != std::string::npos);
  CHECK(text.find("# TYPE dtrain_worker_samples_per_second gauge\n") != std::string::npos);
  CHECK(text.find("# TYPE dtrain_worker_device_mem_peak_bytes gauge\n") != std::string::npos);
  CHECK(text.find("# TYPE dtrain_worker_model_flops_per_second gauge\n") != std::string::npos);
  CHECK(text.find("# TYPE dtrain_worker_mfu gauge\n") != std::string::npos);
  // Rank 0 did not report its model: no model FLOP/s or MFU sample, not a 0 that reads as a measurement.
  CHECK(text.find("dtrain_worker_model_flops_per_second{") == std::string::npos);
  CHECK(text.find("dtrain_worker_mfu{") == std::string::npos);
  // Ranks 1-3 never reported: no made-up zeros for them.
  CHECK(text.find("rank=\"1\"") == std::string::npos);
  CHECK(text.find("# TYPE dtrain_job_restarts_total counter\ndtrain_job_restarts_total{job=\"job \\\"q\\\"\\\\x\"} 2\n")
        != std::string::npos);
  CHECK(text.find("dtrain_node_up{job=\"job \\\"q\\\"\\\\x\",node=\"0\"} 1\n") != std::string::npos);
  CHECK(text.find("dtrain_node_up{job=\"job \\\"q\\\"\\\\x\",node=\"1\"} 0\n") != std::string::npos);
  CHECK(count_of(text, "# HELP ") == 13);
  CHECK(count_of(text, "# TYPE ") == 13);
}

TEST_CASE("the snapshot names the metrics address and every node of the round") {
  dtrain::spec::Plan plan;
  dtrain::spec::WorkerPlan w;
  w.node_rank = 0;
  w.host = "h0";
  plan.workers.push_back(w);
  JobStatus status("j");
  status.round_started(0, plan);
  Diagnoser diagnoser(1.2);
  CHECK(status.snapshot("running", diagnoser, 0)["metrics_address"].is_null());
  status.set_metrics_address("127.0.0.1:9400");
  const auto snapshot = status.snapshot("running", diagnoser, 0);
  CHECK(snapshot["metrics_address"] == "127.0.0.1:9400");
  CHECK(snapshot["nodes"] == nlohmann::ordered_json::parse(R"([{"node": 0, "host": "h0", "up": true}])"));
}
