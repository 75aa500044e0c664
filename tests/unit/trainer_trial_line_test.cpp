// A trial of `dtrain tune` in dtrain-trainer (trainer/train/trial.h): DTRAIN_TUNE_TRIAL read strictly, the run's
// options, what each step adds to the report, and the "dtrain-trial: {json}" line with cli/tune/trial.h's fields.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/comm/local/communicator.h"
#include "trainer/train/trial.h"

using namespace dtrain::trainer;

namespace trial_test {

// What `body` wrote to file descriptor 2 (the trial line goes to stderr).
std::string captured_stderr(const std::function<void()>& body) {
  std::fflush(stderr);
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  const int saved = dup(2);
  dup2(fileno(file), 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  std::rewind(file);
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) text += static_cast<char>(c);
  std::fclose(file);
  return text;
}

// The JSON after the prefix of the one line in `text`.
nlohmann::ordered_json line_json(const std::string& text) {
  REQUIRE(text.rfind(std::string(kTrialPrefix), 0) == 0);
  REQUIRE(text.find('\n') == text.size() - 1);
  return nlohmann::ordered_json::parse(text.substr(kTrialPrefix.size()));
}

// The message parse_trial_plan refuses `value` with ("" when it accepts it).
std::string refusal(const std::string& value) {
  try {
    parse_trial_plan(value);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Sets DTRAIN_TUNE_TRIAL (and unsets RANK) for a scope.
struct TrialEnv {
  explicit TrialEnv(const char* value) {
    setenv(kTrialEnv, value, 1);
    unsetenv("RANK");
  }
  ~TrialEnv() { unsetenv(kTrialEnv); }
};

StepMetrics step_metrics(std::uint64_t step, double loss, double step_ms, double comm_exposed_ms) {
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.step_ms = step_ms;
  m.comm_exposed_ms = comm_exposed_ms;
  return m;
}

TrainState batch_shape() {
  TrainState shape;
  shape.batch_size = 2;
  shape.seq_len = 32;
  shape.grad_accum = 3;
  shape.world_size = 1;
  shape.num_params = 1000;
  return shape;
}

}  // namespace trial_test

using namespace trial_test;

TEST_CASE("DTRAIN_TUNE_TRIAL: the three whole numbers, in any order and spacing") {
  const TrialPlan plan = parse_trial_plan("{\"warmup\":2,\"steps\":4,\"losses\":3}");
  CHECK(plan.warmup == 2);
  CHECK(plan.steps == 4);
  CHECK(plan.losses == 3);
  CHECK(plan.total() == 6);
  const TrialPlan spaced = parse_trial_plan(" {\n \"losses\" : 0 , \"steps\": 1,\t\"warmup\": 0 } ");
  CHECK(spaced.warmup == 0);
  CHECK(spaced.steps == 1);
  CHECK(spaced.losses == 0);
  CHECK(parse_trial_plan("{\"warmup\":0,\"steps\":3,\"losses\":3}").losses == 3);
}

TEST_CASE("DTRAIN_TUNE_TRIAL: anything else is refused, naming the variable, its value and what is wrong") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "expected '{' at the start"},
      {"warmup=2", "expected '{' at the start"},
      {"{}", "\"warmup\" is missing"},
      {"{\"warmup\":2,\"steps\":4}", "\"losses\" is missing"},
      {"{\"warmup\":2,\"steps\":0,\"losses\":0}", "\"steps\" is below 1"},
      {"{\"warmup\":-1,\"steps\":4,\"losses\":0}", "\"warmup\" is below 0"},
      {"{\"warmup\":2,\"steps\":4,\"losses\":7}", "\"losses\" is not from 0 to warmup + steps (6)"},
      {"{\"warmup\":2,\"steps\":4,\"losses\":-1}", "\"losses\" is not from 0 to warmup + steps (6)"},
      {"{\"warmup\":2.5,\"steps\":4,\"losses\":0}", "\"warmup\" is not a whole number"},
      {"{\"warmup\":2e3,\"steps\":4,\"losses\":0}", "\"warmup\" is not a whole number"},
      {"{\"warmup\":\"2\",\"steps\":4,\"losses\":0}", "\"warmup\" is not a whole number"},
      {"{\"warmup\":null,\"steps\":4,\"losses\":0}", "\"warmup\" is not a whole number"},
      {"{\"warmup\":99999999999999999999,\"steps\":4,\"losses\":0}", "\"warmup\" is not a whole number"},
      {"{\"warmup\":2,\"steps\":4,\"losses\":0,\"device\":1}", "\"device\" is not one of its members"},
      {"{\"warmup\":2,\"steps\":4,\"steps\":5,\"losses\":0}", "\"steps\" appears twice"},
      {"{\"warmup\":2,\"steps\":4,\"losses\":0} x", "there is text after the object"},
      {"{\"warmup\":2,\"steps\":4,\"losses\":0,}", "before a member's name"},
      {"{\"warmup\":2 \"steps\":4}", "expected '}' at the end of the object"},
      {"{\"warmup\" 2}", "expected ':' after \"warmup\""},
      {"{\"warmup", "has no closing"},
  };
  for (const auto& [value, what] : cases) {
    CAPTURE(value);
    const std::string message = refusal(value);
    CHECK(message.find("DTRAIN_TUNE_TRIAL='" + value + "' is not a trial: ") == 0);
    CHECK(message.find(what) != std::string::npos);
    CHECK(message.find("{\"warmup\":W,\"steps\":N,\"losses\":K}") != std::string::npos);
  }
}

TEST_CASE("DTRAIN_TUNE_TRIAL unset: no trial, the options as given, no line") {
  unsetenv(kTrialEnv);
  CHECK_FALSE(trial_plan_from_env().has_value());
  TrainOptions options;
  options.steps = 3;
  options.save_every = 2;
  TrialRun trial(options);
  CHECK(trial.options().steps == 3);
  CHECK(trial.options().save_every == 2);
  LocalCommunicator comm;
  const std::string out = captured_stderr([&] {
    trial.record(step_metrics(1, 5.0, 10, 0), StepTimes{}, comm, batch_shape());
    CHECK(trial.end(0) == 0);
  });
  CHECK(out.empty());
  CHECK(trial.report().steps == 0);
}

TEST_CASE("a trial runs W + N steps from a fresh start without checkpoints") {
  const TrialEnv env("{\"warmup\":2,\"steps\":4,\"losses\":3}");
  REQUIRE(trial_plan_from_env().has_value());
  TrainOptions options;
  options.steps = 3;
  options.save_every = 1;
  options.resume = true;
  const TrialRun trial(options);
  CHECK(trial.options().steps == 6);
  CHECK(trial.options().save_every == 0);
  CHECK_FALSE(trial.options().resume);
  setenv(kTrialEnv, "{\"warmup\":2}", 1);
  CHECK_THROWS_AS(TrialRun{options}, std::invalid_argument);
}

TEST_CASE("the trial line: the measured steps, the first losses and the run's facts, parsed back") {
  const TrialEnv env("{\"warmup\":2,\"steps\":4,\"losses\":3}");
  TrialRun trial{TrainOptions{}};
  LocalCommunicator comm;
  const float losses[] = {5.5451774597167969f, 5.4012346267700195f, 5.25f, 5.1f, 5.0f, 4.9f};
  for (int i = 0; i < 6; ++i) {
    StepTimes times;
    times.data_wait_ms = 10.0 * (i + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(i >= 2 ? 20 : 1));
    trial.record(step_metrics(i + 1, losses[i], 1000, 5.0), times, comm, batch_shape());
  }
  const std::string out = captured_stderr([&] { CHECK(trial.end(0) == 0); });
  const nlohmann::ordered_json line = line_json(out);
  std::vector<std::string> keys;
  for (const auto& item : line.items()) keys.push_back(item.key());
  CHECK(keys == std::vector<std::string>{"rank", "steps", "complete", "device", "step_s", "data_wait_s", "comm_s",
                                         "samples", "tokens", "losses", "rss_bytes", "device_peak_bytes", "cpus",
                                         "threads", "loader", "ddp", "trainer"});
  CHECK(line["rank"] == 0);
  CHECK(line["steps"] == 6);
  CHECK(line["complete"] == true);
  CHECK(line["device"] == "cpu");
  REQUIRE(line["step_s"].size() == 4);
  for (const auto& s : line["step_s"]) CHECK((s.get<double>() >= 0.02 && s.get<double>() < 1.0));
  // Steps 3..6: 30 + 40 + 50 + 60 ms of data wait, 4 x 5 ms exposed communication.
  CHECK(line["data_wait_s"].get<double>() == doctest::Approx(0.18));
  CHECK(line["comm_s"].get<double>() == doctest::Approx(0.02));
  CHECK(line["samples"] == 2 * 3 * 4);
  CHECK(line["tokens"] == 2 * 3 * 4 * 32);
  REQUIRE(line["losses"].size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(static_cast<float>(line["losses"][i].get<double>()) == losses[i]);
  CHECK(line["rss_bytes"].get<double>() > 1e6);
  CHECK(line["device_peak_bytes"] == 0);
  CHECK(line["cpus"].get<int>() >= 1);
  CHECK(line["threads"].get<int>() >= 1);
  CHECK(line["loader"].is_null());
  CHECK(line["ddp"].is_null());
  CHECK(line["trainer"] == nlohmann::ordered_json::parse("{\"ddp_bucket_mb\":0,\"backend\":\"local\"}"));
  // Once: a second end() writes nothing.
  CHECK(captured_stderr([&] { trial.end(0); }).empty());
}

TEST_CASE("a trial without warm-up times its first step from train_step's own span") {
  const TrialEnv env("{\"warmup\":0,\"steps\":2,\"losses\":0}");
  TrialRun trial{TrainOptions{}};
  LocalCommunicator comm;
  trial.record(step_metrics(1, 5.0, 250, 0), StepTimes{}, comm, batch_shape());
  trial.record(step_metrics(2, 5.0, 250, 0), StepTimes{}, comm, batch_shape());
  REQUIRE(trial.report().step_s.size() == 2);
  CHECK(trial.report().step_s[0] == doctest::Approx(0.25));
  CHECK(trial.report().step_s[1] < 0.25);
  CHECK(trial.report().losses.empty());
}

TEST_CASE("a run that ends early writes the steps it made, not complete, and keeps its exit code") {
  const TrialEnv env("{\"warmup\":1,\"steps\":3,\"losses\":4}");
  TrialRun trial{TrainOptions{}};
  LocalCommunicator comm;
  trial.record(step_metrics(1, 5.0, 10, 0), StepTimes{}, comm, batch_shape());
  trial.record(step_metrics(2, std::numeric_limits<double>::quiet_NaN(), 10, 0), StepTimes{}, comm, batch_shape());
  int code = -1;
  const nlohmann::ordered_json line = line_json(captured_stderr([&] { code = trial.end(1); }));
  CHECK(code == 1);
  CHECK(line["complete"] == false);
  CHECK(line["steps"] == 2);
  CHECK(line["step_s"].size() == 1);
  REQUIRE(line["losses"].size() == 2);
  CHECK(line["losses"][0] == 5.0);
  CHECK(line["losses"][1].is_null());
}

TEST_CASE("a failure before the first step: rank from RANK, no trainer facts yet") {
  const TrialEnv env("{\"warmup\":1,\"steps\":3,\"losses\":0}");
  setenv("RANK", "3", 1);
  TrialRun trial{TrainOptions{}};
  unsetenv("RANK");
  const nlohmann::ordered_json line = line_json(captured_stderr([&] { trial.end(2); }));
  CHECK(line["rank"] == 3);
  CHECK(line["steps"] == 0);
  CHECK(line["complete"] == false);
  CHECK(line["trainer"].is_null());
}

TEST_CASE("trial_line: numbers that are not finite are null; the backend is a JSON string") {
  TrialReport report;
  report.step_s = {0.5, std::numeric_limits<double>::infinity()};
  report.described = true;
  report.ddp_bucket_mb = 3.25;
  report.backend = "odd\"name\\";
  const std::string text = trial_line(report);
  const nlohmann::ordered_json line = nlohmann::ordered_json::parse(text.substr(kTrialPrefix.size()));
  CHECK(line["step_s"][0] == 0.5);
  CHECK(line["step_s"][1].is_null());
  CHECK(line["trainer"]["ddp_bucket_mb"] == 3.25);
  CHECK(line["trainer"]["backend"] == "odd\"name\\");
}
