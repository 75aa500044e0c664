// The trials of `dtrain tune` (session.h): the schedule, the budget and the progress lines.

#include "cli/tune/session.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/tune/measure.h"
#include "common/clock.h"

namespace dtrain::tune {
namespace {

using Clock = std::chrono::steady_clock;

// A trial stopped at its deadline ran longer than this many baseline trials.
constexpr double kTrialSlack = 3.0;
constexpr double kTrialSlackS = 30.0;

struct Session {
  const spec::Spec& spec;
  const TuneOptions& options;
  const TrialLauncher& launch;
  std::FILE* out;
  Clock::time_point started = Clock::now();
  Clock::time_point deadline;
  TuneResult result;
  int trial_number = 0;
  int planned = 0;
  double trial_cap_s = 0;   // 0: the first trial, bound by the budget alone

  void event(const nlohmann::ordered_json& fields) const {
    std::ofstream file(std::filesystem::path(options.dir) / "events.jsonl", std::ios::app);
    nlohmann::ordered_json line = {{"ts", unix_ms()}};
    line.update(fields);
    // (A failure's text comes from the workers' output: any bytes; not UTF-8 ones are replaced.)
    file << line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
  }

  spec::Spec trial_spec(const Candidate& c) const;
  TrialRun run_one(CandidateResult& c, int repeat);
  bool run_schedule(const std::vector<int>& order, int repeat);
  void progress(const CandidateResult& c, int repeat, const TrialRun& run, const std::string& problem) const;
};

std::string rate_text(double rate, const std::string& unit) {
  char text[64];
  std::snprintf(text, sizeof text, rate >= 100 ? "%.0f %s/s" : "%.3g %s/s", rate, unit.c_str());
  return text;
}

spec::Spec Session::trial_spec(const Candidate& c) const {
  spec::Spec s = spec;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "-t%02d", trial_number);
  if (s.name.size() + std::strlen(suffix) > spec::kMaxNameLength) s.name.resize(spec::kMaxNameLength - 4);
  s.name += suffix;
  s.logs.dir = (std::filesystem::path(options.dir) / "trials").string();
  s.logs.console = spec::Spec::Logs::Console::all;
  s.restart.max_restarts = 0;
  apply_overlay(c.overlay, s);   // (an empty one, the baseline's and dtrain-trainer's flags, changes nothing)
  for (const auto& [name, value] : c.env) s.env[name] = value;
  if (!c.args.empty()) s.command = with_flags(s.command, c.args);
  s.tune_env["DTRAIN_TUNE_TRIAL"] = trial_env_value(options.trial);
  return s;
}

void Session::progress(const CandidateResult& c, int repeat, const TrialRun& run, const std::string& problem) const {
  std::string what = problem.empty() ? rate_text(c.trials.empty() ? 0 : c.trials.back().steps.rate(), result.unit)
                                     : problem;
  if (problem.empty() && &c != &result.results.front() && !result.results.front().trials.empty()) {
    char ratio[48];
    std::snprintf(ratio, sizeof ratio, ", x%.2f of the baseline so far",
                  c.trials.back().steps.rate() / median_rate([&] {
                    std::vector<TrialSteps> b;
                    for (const auto& t : result.results.front().trials) b.push_back(t.steps);
                    return b;
                  }()));
    what += ratio;
  }
  const std::string number = std::to_string(trial_number) + (planned > 0 ? "/" + std::to_string(planned) : "");
  std::fprintf(out, "tune: trial %-5s %-36s  repeat %d/%d  %s  (%.1f s)\n", number.c_str(), c.candidate.name.c_str(),
               repeat, options.repeats, what.c_str(), run.seconds);
  std::fflush(out);
}

TrialRun Session::run_one(CandidateResult& c, int repeat) {
  ++trial_number;
  ++result.trials_run;
  Clock::time_point until = deadline;
  if (trial_cap_s > 0) {
    until = std::min(until, Clock::now() + std::chrono::milliseconds(static_cast<long long>(trial_cap_s * 1e3)));
  }
  TrialRun run;
  try {
    run = launch(trial_spec(c.candidate), until);
  } catch (const std::exception& e) {
    run.exit_code = 2;
    run.tail = e.what();
  }
  const bool budget_over = run.stopped && Clock::now() >= deadline - std::chrono::milliseconds(100);
  const std::string problem = trial_problem(run, options.trial);
  if (problem.empty()) {
    if (result.unit.empty()) result.unit = unit_of(run);
    c.trials.push_back(measure_trial(run, result.unit));
    if (c.status == "not_run") c.status = "measured";
  } else if (run.interrupted || budget_over) {
    result.ended = run.interrupted ? "interrupted" : "the budget ended during trial " + std::to_string(trial_number);
  } else {
    c.status = run.stopped ? "timed_out" : "failed";
    c.note = problem + (run.run_dir.empty() ? "" : " (" + run.run_dir + ")");
  }
  progress(c, repeat, run, problem);
  const std::filesystem::path rel = run.run_dir.empty() ? "" : std::filesystem::relative(run.run_dir, options.dir);
  event({{"event", "tune_trial"}, {"trial", trial_number}, {"candidate", c.candidate.name}, {"repeat", repeat},
         {"status", problem.empty() ? "ok" : problem}, {"exit_code", run.exit_code}, {"seconds", run.seconds},
         {"rate", problem.empty() ? c.trials.back().steps.rate() : 0.0}, {"unit", result.unit},
         {"run", rel.string()}});
  return run;
}

// One pass over `order` (indices into results); false when the tuning must end (interrupted, budget).
bool Session::run_schedule(const std::vector<int>& order, int repeat) {
  for (int index : order) {
    CandidateResult& c = result.results[static_cast<std::size_t>(index)];
    if (c.status == "failed" || c.status == "timed_out") continue;
    run_one(c, repeat);
    if (!result.ended.empty()) return false;
  }
  return true;
}

// The candidates that fit the rest of the budget, from the first baseline trial's duration.
std::size_t fitting_candidates(std::size_t wanted, double trial_s, double left_s, int repeats, std::string& note) {
  const double fits = std::floor(left_s / std::max(trial_s, 0.1));
  const auto keep = static_cast<std::size_t>(std::max(0.0, std::floor((fits + 1) / repeats) - 1));
  if (keep >= wanted) return wanted;
  char text[256];
  std::snprintf(text, sizeof text, "the budget fits about %.0f more trials of %.0f s: %zu of the %zu candidates are "
                "tried (--budget %.0f would try them all)", fits, trial_s, keep, wanted,
                std::ceil((static_cast<double>((wanted + 1) * static_cast<std::size_t>(repeats)) + 1) * trial_s));
  note = text;
  return keep;
}

}  // namespace

bool is_trainer_command(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  const std::string base = std::filesystem::path(command.front()).filename().string();
  return base == "dtrain-trainer";
}

TuneResult run_tuning(const spec::Spec& spec, const TuneOptions& options, const TrialLauncher& launch,
                      std::FILE* out) {
  Session s{spec, options, launch, out, Clock::now(), {}, {}, 0, 0, 0};
  s.deadline = s.started + std::chrono::milliseconds(static_cast<long long>(options.budget_s * 1e3));
  s.result.unit.clear();
  s.result.results.push_back({Candidate{"baseline", "", {}, {}, {}}, "not_run", "", {}, {}, 0, "n/a"});
  s.planned = 0;   // not known before the baseline's facts chose the candidates
  s.event({{"event", "tune_start"}, {"job", spec.name}, {"budget_s", options.budget_s},
           {"warmup_steps", options.trial.warmup}, {"trial_steps", options.trial.steps},
           {"repeats", options.repeats}});
  const TrialRun first = s.run_one(s.result.results.front(), 1);
  TuneResult& r = s.result;
  if (r.results.front().trials.empty()) {
    const std::string problem = trial_problem(first, options.trial);
    r.exit_code = first.interrupted ? 130 : (first.stopped || first.exit_code == 0) ? 2 : 1;
    r.message = first.stopped && !first.interrupted
                    ? "the budget (" + std::to_string(static_cast<int>(options.budget_s)) + " s) ended before the "
                      "baseline's first trial did: give a larger --budget, or fewer --warmup-steps/--trial-steps"
                    : "the baseline trial (the job as it is) " + problem;
    if (!first.run_dir.empty()) r.message += "\n  its run: " + first.run_dir;
    if (r.unit.empty()) r.unit = "steps";
    s.event({{"event", "tune_end"}, {"trials", r.trials_run}, {"ended", "the baseline could not be measured"}});
    return r;
  }
  r.facts = job_facts(first.ranks, is_trainer_command(spec.command), spec.nodes.max_count);
  r.facts.bound = spec.binding == spec::Binding::automatic;
  auto candidates = choose_candidates(r.facts, options.parts);
  const double trial_s = std::max(first.seconds, 0.1);
  s.trial_cap_s = std::max(kTrialSlack * trial_s, trial_s + kTrialSlackS);
  const double left = std::chrono::duration<double>(s.deadline - Clock::now()).count();
  const std::size_t keep = fitting_candidates(candidates.size(), trial_s, left, options.repeats, r.budget_note);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    CandidateResult c{candidates[i], "not_run", i < keep ? "" : "not tried: the budget", {}, {}, 0, "n/a"};
    r.results.push_back(std::move(c));
  }
  if (!r.budget_note.empty()) std::fprintf(out, "tune: %s\n", r.budget_note.c_str());
  if (keep == 0 && !candidates.empty()) r.exit_code = 2;
  s.planned = static_cast<int>((keep + 1) * static_cast<std::size_t>(options.repeats));
  std::vector<int> order;
  for (std::size_t i = 1; i <= keep; ++i) order.push_back(static_cast<int>(i));
  bool going = keep > 0 && s.run_schedule(order, 1);
  // Every later round is the baseline and the candidates, rotated by one more: each takes each place in a round.
  order.insert(order.begin(), 0);
  for (int repeat = 2; going && repeat <= options.repeats; ++repeat) {
    std::rotate(order.begin(), order.begin() + 1, order.end());
    going = s.run_schedule(order, repeat);
  }
  if (r.ended == "interrupted") r.exit_code = 130;
  r.seconds = std::chrono::duration<double>(Clock::now() - s.started).count();
  s.event({{"event", "tune_end"}, {"trials", r.trials_run}, {"seconds", r.seconds}, {"ended", r.ended}});
  return r;
}

}  // namespace dtrain::tune
