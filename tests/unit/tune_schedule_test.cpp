// The session of trials (cli/tune/session.h) with a scripted launcher: its order, its budget, a candidate that fails,
// a knob that changes the losses, and what is concluded (outcome.h). The trials themselves, launched for real:
// tests/integration/test_tune*.py.

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <unistd.h>

#include "cli/tune/outcome.h"
#include "cli/tune/session.h"

namespace tune_schedule_test {

using namespace dtrain::tune;
namespace fs = std::filesystem;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("dtrain-t-tune-" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

dtrain::spec::Spec script_job() {
  dtrain::spec::Spec spec;
  spec.name = "train";
  spec.command = {"python3", "train.py"};
  spec.binding = dtrain::spec::Binding::none;   // no binding candidate: the data part's two alone
  return spec;
}

// The workers' answer to a trial: `step_s` a step, losses from `loss`, whatever the knobs; data wait half the step.
TrialRun answer(double step_s, double loss, int exit_code = 0) {
  TrialRun run;
  run.world = 2;
  run.exit_code = exit_code;
  run.seconds = 0.5;
  for (int rank = 0; rank < 2; ++rank) {
    RankTrial r;
    r.rank = rank;
    r.steps = 8;
    r.complete = exit_code == 0;
    for (int i = 0; i < 5; ++i) r.step_s.push_back(step_s * (1 + 0.01 * ((i * 7 + rank) % 5)));
    r.samples = 40;
    r.losses = {loss, loss - 0.25};
    r.cpus = 1;
    r.threads = 1;
    r.data_wait_s = step_s * 5 * 0.6;
    r.loader_num_workers = 0;
    r.loader_json = "{\"num_workers\":0}";
    run.ranks.push_back(r);
  }
  return run;
}

std::string knobs_of(const dtrain::spec::Spec& spec) {
  const auto it = spec.tune_env.find("DTRAIN_TUNE");
  return it == spec.tune_env.end() ? "baseline" : it->second;
}

TuneResult tune_with(const std::function<TrialRun(const std::string&)>& workers, int repeats,
                     std::vector<std::string>* order = nullptr, double budget_s = 600) {
  static Scratch scratch;
  TuneOptions options;
  options.trial = {3, 5, 2};
  options.repeats = repeats;
  options.budget_s = budget_s;
  options.dir = scratch.dir.string();
  std::FILE* out = std::fopen("/dev/null", "w");
  auto result = run_tuning(script_job(), options, [&](const dtrain::spec::Spec& spec, auto) {
    CHECK(spec.tune_env.at("DTRAIN_TUNE_TRIAL") == "{\"warmup\":3,\"steps\":5,\"losses\":2}");
    CHECK(spec.restart.max_restarts == 0);
    if (order != nullptr) order->push_back(knobs_of(spec));
    return workers(knobs_of(spec));
  }, out);
  std::fclose(out);
  return result;
}

TEST_CASE("baseline and candidates are interleaved, rotated each round") {
  std::vector<std::string> order;
  auto result = tune_with([](const std::string&) { return answer(0.02, 2.5); }, 3, &order);
  const std::string w1 = R"({"file":"dtrain tune","dataloader":{"num_workers":1}})";
  const std::string w1p = R"({"file":"dtrain tune","dataloader":{"num_workers":1,"prefetch_factor":4,)"
                          R"("persistent_workers":true}})";
  CHECK(order == std::vector<std::string>{"baseline", w1, w1p, w1, w1p, "baseline", w1p, "baseline", w1});
  CHECK(result.exit_code == 0);
  CHECK(result.trials_run == 9);
  // The same speed everywhere: nothing is recommended, and the verdict says the job is tuned already.
  const auto conclusion = conclude(result, script_job());
  CHECK(result.recommended == -1);
  CHECK(conclusion.verdict.find("No candidate was faster beyond the noise") != std::string::npos);
  CHECK(conclusion.tune_yaml.empty());
}

TEST_CASE("the faster candidate is recommended, a failed one is not tried again, a loss change is refused") {
  std::vector<std::string> order;
  auto result = tune_with([](const std::string& knobs) {
    if (knobs == "baseline") return answer(0.02, 2.5);
    if (knobs.find("prefetch") != std::string::npos) return answer(0.01, 2.9);   // faster, other losses
    return answer(0.012, 2.5, 1);                                                // fails
  }, 2, &order);
  CHECK(order.size() == 5);   // baseline, w1 (fails), w1p; w1p, baseline
  REQUIRE(result.results.size() == 3);
  CHECK(result.results[1].status == "failed");
  CHECK(result.results[1].note.find("exited with code 1") != std::string::npos);
  const auto conclusion = conclude(result, script_job());
  CHECK(result.results[2].status == "loss_changed");
  CHECK(result.results[2].loss_check == "differs");
  CHECK(result.recommended == -1);
  CHECK(conclusion.lines.empty());
}

TEST_CASE("a recommendation has its lines and a tune.yaml that reads back") {
  auto result = tune_with([](const std::string& knobs) {
    return answer(knobs == "baseline" ? 0.02 : knobs.find("prefetch") != std::string::npos ? 0.011 : 0.012, 2.5);
  }, 3);
  const auto conclusion = conclude(result, script_job());
  REQUIRE(result.recommended == 2);
  CHECK(result.results[2].speed.faster());
  CHECK(result.results[2].loss_check == "same");
  CHECK(result.unit == "samples");
  REQUIRE(!conclusion.lines.empty());
  CHECK(conclusion.lines[0] == "DataLoader(dataset, ..., num_workers=1, prefetch_factor=4, persistent_workers=True)");
  const Overlay back = parse_overlay(conclusion.tune_yaml, "tune.yaml");
  CHECK(back.dataloader.num_workers == 1);
  CHECK(back.dataloader.prefetch_factor == 4);
  CHECK(back.dataloader.persistent_workers == true);
  const std::string table = render_table(result);
  CHECK(table.find("recommended") < table.find("baseline"));
}

TEST_CASE("a baseline that cannot be measured ends the tuning with the reason") {
  auto few = tune_with([](const std::string&) {
    TrialRun run = answer(0.02, 2.5);
    for (auto& r : run.ranks) {
      r.complete = false;
      r.steps = 0;
    }
    return run;
  }, 3);
  CHECK(few.exit_code == 2);
  CHECK(few.message.find("without an optimizer step") != std::string::npos);
  auto broke = tune_with([](const std::string&) { return answer(0.02, 2.5, 3); }, 3);
  CHECK(broke.exit_code == 1);
  auto slow = tune_with([](const std::string&) {
    TrialRun run;
    run.stopped = true;
    run.exit_code = 130;
    return run;
  }, 3, nullptr, 1);
  CHECK(slow.exit_code == 2);
  CHECK(slow.message.find("the budget (1 s) ended before the baseline's first trial did") != std::string::npos);
}

TEST_CASE("a budget that fits fewer trials keeps the first candidates and says what would run them all") {
  std::vector<std::string> order;
  // Each trial says it took 0.5 s; a 2 s budget fits about 3 more: one candidate with 2 repeats (2 x 2 - 1 trials).
  auto result = tune_with([](const std::string&) { return answer(0.02, 2.5); }, 2, &order, 2);
  CHECK(result.budget_note.find("1 of the 2 candidates are tried") != std::string::npos);
  CHECK(result.results[2].status == "not_run");
}

}  // namespace tune_schedule_test
