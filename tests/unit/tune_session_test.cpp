// dtrain tune's parts without a launcher: the trial line, the statistics, the candidates, the measures and the
// session's schedule, budget and failures with a scripted launcher (the real trials: tests/integration/test_tune*.py).

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/tune/measure.h"
#include "cli/tune/outcome.h"
#include "cli/tune/session.h"

namespace tune_session_test {

using namespace dtrain::tune;

std::string line(int rank, const std::string& extra = "") {
  return R"({"rank":)" + std::to_string(rank) + R"(,"steps":8,"complete":true,"device":"cpu","step_s":[0.1,0.1,0.1],)"
         R"("data_wait_s":0.15,"comm_s":0.03,"samples":12,"tokens":null,"losses":[2.5,2.4,null],"rss_bytes":1e8,)"
         R"("device_peak_bytes":0,"cpus":4,"threads":1,"loader":{"num_workers":0,"pin_memory":false,)"
         R"("prefetch_factor":null,"persistent_workers":false},"ddp":{"bucket_cap_mb":25,)"
         R"("gradient_as_bucket_view":false},"trainer":null)" + extra + "}";
}

TEST_CASE("a trial line is read field by field, and anything else is not a trial line") {
  auto t = parse_trial_line(line(1));
  REQUIRE(t);
  CHECK(t->rank == 1);
  CHECK(t->complete);
  CHECK(t->step_s.size() == 3);
  CHECK(t->samples == doctest::Approx(12));
  CHECK(!t->tokens);
  REQUIRE(t->losses.size() == 3);
  CHECK(!t->losses[2]);
  CHECK(t->loader_num_workers == 0);
  CHECK(t->ddp_bucket_cap_mb == doctest::Approx(25));
  CHECK(t->trainer_json.empty());
  CHECK(!parse_trial_line("not json"));
  CHECK(!parse_trial_line("[1,2]"));
  CHECK(!parse_trial_line(R"({"rank":"zero"})"));
  CHECK(!parse_trial_line(R"({"rank":-1})"));
  CHECK(!parse_trial_line(R"({"rank":0,"step_s":[0.1,-1]})"));
  CHECK(!parse_trial_line(R"({"rank":0,"step_s":["a"]})"));
  // Wrong types of the optional fields are left unset, not a failure.
  auto odd = parse_trial_line(R"({"rank":0,"loader":5,"cpus":"many","losses":["x"]})");
  REQUIRE(odd);
  CHECK(!odd->loader_num_workers);
  CHECK(odd->cpus == 0);
}

TEST_CASE("trial lines are found in a log or a console capture, the last of each rank") {
  const std::string text = "hello\n[1] dtrain-trial: " + line(1) + "\nprint('dtrain-trial: ')\n"
                           "dtrain-trial: " + line(0) + "\nsome dtrain-trial: " + line(2) + "\n" +
                           "dtrain-trial: " + line(0, R"(,"threads":7)") + "\n";
  const auto found = find_trial_lines(text);
  REQUIRE(found.size() == 2);   // rank 2's is not at the start of its line
  CHECK(found[0].rank == 0);
  CHECK(found[0].threads == 7);
  CHECK(found[1].rank == 1);
}

TrialSteps steps(double each, int n, double jitter, double units = 10) {
  TrialSteps t;
  t.units_per_step = units;
  for (int i = 0; i < n; ++i) t.step_s.push_back(each * (1 + jitter * std::sin(i * 1.7)));
  return t;
}

TEST_CASE("a speed-up is claimed only when its interval excludes 1") {
  const std::vector<TrialSteps> base = {steps(0.02, 30, 0.05), steps(0.021, 30, 0.05), steps(0.019, 30, 0.05)};
  const std::vector<TrialSteps> fast = {steps(0.01, 30, 0.05), steps(0.0105, 30, 0.05), steps(0.0098, 30, 0.05)};
  const SpeedUp up = speed_up(fast, base);
  CHECK(up.ratio == doctest::Approx(2).epsilon(0.05));
  CHECK(up.faster());
  CHECK(up.low <= up.ratio);
  CHECK(up.high >= up.ratio);
  // The same configuration measured again: no speed-up, whatever the noise.
  const std::vector<TrialSteps> again = {steps(0.0205, 30, 0.05), steps(0.0195, 30, 0.05), steps(0.02, 30, 0.05)};
  const SpeedUp same = speed_up(again, base);
  CHECK(!same.faster());
  CHECK(!same.slower());
  // Deterministic: the same trials give the same interval.
  const SpeedUp twice = speed_up(fast, base);
  CHECK(twice.low == up.low);
  CHECK(twice.high == up.high);
  // A side without steps says nothing.
  CHECK(speed_up({}, base).ratio == 1);
}

TEST_CASE("candidates follow the measured bottleneck") {
  JobFacts f;
  f.ranks = 2;
  f.cpus = 1;
  f.threads = 1;
  f.data_share = 0.6;
  f.comm_share = 0.05;
  f.compute_share = 0.35;
  f.has_loader = true;
  f.has_ddp = true;
  auto c = choose_candidates(f);
  REQUIRE(c.size() == 2);   // num_workers=1, then with prefetch and persistent workers; comm under 10%
  CHECK(c[0].name == "num_workers=1");
  CHECK(c[0].overlay.dataloader.num_workers == 1);
  CHECK(c[1].overlay.dataloader.persistent_workers == true);
  f.cpus = 8;
  f.cuda = true;
  c = choose_candidates(f);
  REQUIRE(c.size() == 5);   // 4 and 8 workers, 8 with prefetch; the allocator and threads = 8 for compute
  CHECK(c[0].overlay.dataloader.num_workers == 4);
  CHECK(c[1].overlay.dataloader.num_workers == 8);
  CHECK(c[0].overlay.dataloader.pin_memory == true);
  CHECK(c[3].overlay.env.at("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True");
  CHECK(c[4].overlay.intra_op_threads == 8);
  // On a GPU, exposed communication also tries NCCL's two algorithms, forced.
  f.comm_share = 0.3;
  f.data_share = 0.05;
  f.compute_share = 0.65;
  c = choose_candidates(f);
  REQUIRE(c.size() >= 4);
  CHECK(c[2].name == "NCCL_ALGO=Ring");
  CHECK(c[3].overlay.env.at("NCCL_ALGO") == "Tree");
  // Communication first when it is the bottleneck; the script's own bucket is not tried again.
  f = {};
  f.ranks = 2;
  f.cpus = 2;
  f.threads = 2;
  f.comm_share = 0.5;
  f.compute_share = 0.5;
  f.has_ddp = true;
  f.bucket_cap_mb = 1;
  c = choose_candidates(f);
  REQUIRE(c.size() == 3);
  CHECK(c[0].overlay.ddp.bucket_cap_mb == doctest::Approx(5));
  CHECK(c[1].overlay.ddp.bucket_cap_mb == doctest::Approx(25));
  CHECK(c[2].overlay.ddp.gradient_as_bucket_view == true);
  // Nothing worth a candidate: none.
  f.comm_share = 0.02;
  f.compute_share = 0.98;
  CHECK(choose_candidates(f).empty());
  // Ranks bound to their own CPUs: binding: none is tried (not for one rank a node).
  f.bound = true;
  c = choose_candidates(f);
  REQUIRE(c.size() == 1);
  CHECK(c[0].overlay.binding == dtrain::spec::Binding::none);
  f.ranks = 1;
  CHECK(choose_candidates(f).empty());
  // --parts: those parts' candidates whatever their share, and no other part's.
  f.has_loader = true;
  c = choose_candidates(f, {"data"});
  REQUIRE(!c.empty());
  CHECK(c[0].part == "data");
  CHECK(std::all_of(c.begin(), c.end(), [](const Candidate& x) { return x.part == "data"; }));
}

TEST_CASE("dtrain-trainer's candidates are its flags and its backend") {
  JobFacts f;
  f.trainer = true;
  f.ranks = 2;
  f.cpus = 1;
  f.threads = 1;
  f.comm_share = 0.4;
  f.compute_share = 0.6;
  f.trainer_bucket_mb = 1;
  f.trainer_backend = "shm";
  const auto c = choose_candidates(f);
  REQUIRE(c.size() == 3);
  CHECK(c[0].args == std::vector<std::string>{"--ddp-bucket-mb", "4"});
  CHECK(c[2].env.at("DTRAIN_COMM_BACKEND") == "gloo");
  CHECK(with_flags({"dtrain-trainer", "--ddp-bucket-mb", "1", "--threads=3"}, {"--ddp-bucket-mb", "4", "--threads",
                                                                              "1", "--steps", "9"}) ==
        std::vector<std::string>{"dtrain-trainer", "--ddp-bucket-mb", "4", "--threads=1", "--steps", "9"});
}

TrialRun complete_run(double step_s, double loss = 2.5) {
  TrialRun run;
  run.world = 2;
  for (int rank = 0; rank < 2; ++rank) {
    RankTrial r;
    r.rank = rank;
    r.steps = 5;
    r.complete = true;
    r.step_s.assign(3, step_s);
    r.samples = 12;
    r.losses = {loss, loss - 0.1};
    r.cpus = 1;
    r.threads = 1;
    r.data_wait_s = step_s * 3 * 0.5;
    r.loader_num_workers = 0;
    r.loader_json = "{}";
    run.ranks.push_back(r);
  }
  run.seconds = 1;
  return run;
}

TEST_CASE("a trial that cannot be measured says why") {
  const TrialSettings s{2, 3, 2};
  CHECK(trial_problem(complete_run(0.1), s).empty());
  TrialRun failed = complete_run(0.1);
  failed.exit_code = 1;
  failed.tail = "Traceback: boom";
  CHECK(trial_problem(failed, s).find("code 1: Traceback: boom") != std::string::npos);
  TrialRun none = complete_run(0.1);
  none.ranks[1].complete = false;
  none.ranks[1].steps = 0;
  CHECK(trial_problem(none, s).find("without an optimizer step") != std::string::npos);
  TrialRun few = complete_run(0.1);
  few.ranks[0].complete = false;
  few.ranks[0].steps = 3;
  CHECK(trial_problem(few, s).find("after 3 optimizer step(s); a trial needs --warmup-steps + --trial-steps = 5") !=
        std::string::npos);
  TrialRun lost = complete_run(0.1);
  lost.ranks.pop_back();
  CHECK(trial_problem(lost, s).find("rank 1 wrote no trial line") != std::string::npos);
}

TEST_CASE("measures and the loss check") {
  const TrialMeasure a = measure_trial(complete_run(0.1), "samples");
  CHECK(a.steps.units_per_step == doctest::Approx(8));   // 2 ranks x 12 samples over 3 steps
  CHECK(a.data_wait_ms == doctest::Approx(50));
  CHECK(losses_agree(a, measure_trial(complete_run(0.05, 2.5 + 1e-6), "samples")));
  CHECK(!losses_agree(a, measure_trial(complete_run(0.05, 2.6), "samples")));
}

}  // namespace tune_session_test
