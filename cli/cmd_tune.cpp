// `dtrain tune JOB.yaml` / `dtrain tune [torchrun's options] SCRIPT ARGS`: the remedies for the measured bottleneck
// tried on the job itself, in short interleaved trials (cli/tune/session.h), and what they found: a ranked table,
// the lines for the script, tune.yaml for `--tune`, and the tune directory (cli/tune/result.h).

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "agent/job/python_command.h"
#include "cli/commands.h"
#include "cli/report/report.h"
#include "cli/run/run_args.h"
#include "cli/tune/outcome.h"
#include "cli/tune/trial_launch.h"
#include "common/clock.h"

namespace dtrain::cli {
namespace {

namespace fs = std::filesystem;

struct TuneArgs {
  run::RunArgs run;
  std::vector<std::string> sets;
  int trial_steps = 30;
  int warmup_steps = 10;
  int repeats = 3;
  std::string budget = "10m";
  std::vector<std::string> parts;
  LaunchFlags flags;
};

constexpr int kMaxTrialSteps = 10000;
constexpr int kMaxRepeats = 100;
constexpr int kLossSteps = 5;

// "600", "90s", "10m", "1.5h" in seconds; nothing for anything else or a budget of none.
std::optional<double> parse_budget(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : 0;
  if (scale == 0 || !std::isfinite(value) || value <= 0 || value * scale > 7 * 24 * 3600) return std::nullopt;
  return value * scale;
}

bool is_spec_file(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  const std::string ext = fs::path(command.front()).extension().string();
  return ext == ".yaml" || ext == ".yml";
}

// The options of the script form that a job spec's form does not take: their names, when any was given.
std::string script_options_given(const CLI::App& cmd) {
  static const std::set<std::string> kBoth = {"--trial-steps", "--warmup-steps", "--repeats", "--budget", "--parts",
                                              "--set",
                                              "--logs-dir", "--insecure", "--secret-dir", "command"};
  std::string given;
  for (const auto* option : cmd.get_options()) {
    if (option->count() == 0 || kBoth.count(option->get_name()) || option->get_name() == "--help") continue;
    given += (given.empty() ? "" : ", ") + option->get_name();
  }
  return given;
}

// The job the trials run, as the command line gives it; nothing after saying why.
std::optional<spec::Spec> tune_job(TuneArgs& args, const CLI::App& cmd) {
  if (!is_spec_file(args.run.command)) {
    if (!args.sets.empty()) {
      std::fprintf(stderr, "dtrain tune: --set changes a job spec's keys; give a spec (dtrain tune JOB.yaml --set "
                           "...), or put the change on the script's command line\n");
      return std::nullopt;
    }
    auto job = run::resolve_run_job(args.run, cmd);
    if (!job) return std::nullopt;
    const run::Resolved& r = job->resolved;
    if (cmd.count("--console") > 0 || r.console != run::Resolved::Console::unchanged || !r.log_dir.empty() ||
        r.redirects != 0) {
      std::fprintf(stderr, "dtrain tune: --console, --log-dir, --redirects, --tee and --local-ranks-filter (or their "
                           "PET_ variables) do not apply: the terminal shows the tuning's own lines, and each trial's "
                           "output is in its run directory under the tune directory\n");
      return std::nullopt;
    }
    if (job->resolved.multi) {
      std::fprintf(stderr, "dtrain tune: every trial is launched from this one command, so its nodes must be "
                           "described where it can reach them: write them in a job spec (nodes: provider static, "
                           "ssh or slurm) and run `dtrain tune JOB.yaml`\n");
      return std::nullopt;
    }
    return std::move(job->spec);
  }
  // After the spec (where the program would be), only --set KEY=VALUE.
  const auto& words = args.run.command;
  for (std::size_t i = 1; i < words.size(); ++i) {
    if (words[i] == "--set" && i + 1 < words.size()) {
      args.sets.push_back(words[++i]);
    } else if (words[i].rfind("--set=", 0) == 0) {
      args.sets.push_back(words[i].substr(6));
    } else {
      std::fprintf(stderr, "dtrain tune: %s is a job spec: after it only --set KEY=VALUE, not '%s'\n",
                   words.front().c_str(), words[i].c_str());
      return std::nullopt;
    }
  }
  if (const std::string given = script_options_given(cmd); !given.empty()) {
    std::fprintf(stderr, "dtrain tune: %s is a job spec, and %s belong to the script form (dtrain tune [options] "
                         "SCRIPT): put them in the spec, or --set KEY=VALUE\n", words.front().c_str(), given.c_str());
    return std::nullopt;
  }
  auto spec = load_spec_or_report(args.run.command.front(), args.sets);
  if (spec && cmd.count("--logs-dir") > 0) spec->logs.dir = args.run.logs_dir;
  return spec;
}

// Whether trials can measure this job's steps; says why not.
bool tunable(const spec::Spec& spec) {
  if (tune::is_trainer_command(spec.command)) return true;
  if (spec.shell || !agent::runs_python(spec.command)) {
    std::fprintf(stderr, "dtrain tune: the job's command is neither a PyTorch script (python script.py, -m MODULE, "
                         "-c) nor dtrain-trainer%s: trials count optimizer steps through dtrain's PyTorch bootstrap "
                         "or dtrain-trainer itself, and this program has neither\n",
                 spec.shell ? " (shell: true commands are not looked into)" : "");
    return false;
  }
  if (spec.health.instrument == spec::Spec::Health::Instrument::off) {
    std::fprintf(stderr, "dtrain tune: trials measure a script through dtrain's PyTorch bootstrap, which "
                         "health.instrument: off (--instrument off) turns off: drop it\n");
    return false;
  }
  return true;
}

bool check_numbers(const TuneArgs& a, tune::TuneOptions& options) {
  const auto budget = parse_budget(a.budget);
  const char* bad = nullptr;
  if (a.trial_steps < 3 || a.trial_steps > kMaxTrialSteps) bad = "--trial-steps must be 3 to 10000";
  else if (a.warmup_steps < 0 || a.warmup_steps > kMaxTrialSteps) bad = "--warmup-steps must be 0 to 10000";
  else if (a.repeats < 1 || a.repeats > kMaxRepeats) bad = "--repeats must be 1 to 100";
  else if (!budget) bad = "--budget must be a positive time: seconds (600, 90s), minutes (10m) or hours (1h)";
  if (bad != nullptr) {
    std::fprintf(stderr, "dtrain tune: %s\n", bad);
    return false;
  }
  options.trial = {a.warmup_steps, a.trial_steps, std::min(kLossSteps, a.warmup_steps + a.trial_steps)};
  options.repeats = a.repeats;
  options.budget_s = *budget;
  options.parts = {a.parts.begin(), a.parts.end()};
  return true;
}

void print_conclusion(std::FILE* out, const tune::TuneResult& r, const tune::Conclusion& c,
                      const tune::TuneOptions& options) {
  std::fprintf(out, "\n%s\n%s\n", tune::render_table(r).c_str(), c.verdict.c_str());
  if (!c.lines.empty()) {
    std::fprintf(out, "\nIn the %s:\n", r.facts.trainer ? "job spec" : "script");
    for (const auto& line : c.lines) std::fprintf(out, "  %s\n", line.c_str());
  }
  if (!c.tune_yaml.empty()) {
    const std::string path = (fs::path(options.dir) / "tune.yaml").string();
    std::fprintf(out, "\nOr with no change to the script: add `--tune %s` to `dtrain run` or `dtrain launch`.\n",
                 path.c_str());
  }
  if (!c.suggestions.empty()) {
    std::fprintf(out, "\nNot tried (they change the numerics, the code or the layout; `dtrain plan --from %s`):\n",
                 r.results.front().trials.empty() ? "" : r.results.front().trials.front().run_dir.c_str());
    for (const auto& s : c.suggestions) std::fprintf(out, "  - %s\n", s.c_str());
  }
  if (!r.budget_note.empty()) std::fprintf(out, "\nNote: %s.\n", r.budget_note.c_str());
  if (!r.ended.empty()) std::fprintf(out, "\nThe tuning ended early: %s.\n", r.ended.c_str());
  std::fprintf(out, "\ntuning took %.1f s, %d trials; results: %s\n", r.seconds, r.trials_run,
               (fs::path(options.dir) / "tune.json").string().c_str());
}

int write_results(tune::TuneResult& r, const spec::Spec& spec, const tune::TuneOptions& options,
                  std::uint64_t started_ms, std::FILE* out) {
  const tune::Conclusion c = tune::conclude(r, spec);
  std::ofstream(fs::path(options.dir) / "tune.json") << tune::result_json(r, c, spec, options, started_ms);
  if (!c.tune_yaml.empty()) std::ofstream(fs::path(options.dir) / "tune.yaml") << c.tune_yaml;
  print_conclusion(out, r, c, options);
  const auto page = report::write_report(options.dir);
  if (page.ok()) std::fprintf(out, "report: %s\n", page.value.c_str());
  return r.exit_code;
}

int tune_command(TuneArgs& args, const CLI::App& cmd) {
  tune::TuneOptions options;
  if (!check_numbers(args, options)) return 2;
  std::optional<spec::Spec> spec = tune_job(args, cmd);
  if (!spec || !tunable(*spec)) return 2;
  options.dir = (fs::path(spec->logs.dir) / (spec->name + "-tune-" + timestamp_now())).string();
  std::error_code ec;
  fs::create_directories(fs::path(options.dir) / "trials", ec);
  if (ec) {
    std::fprintf(stderr, "dtrain tune: cannot create %s: %s\n", options.dir.c_str(), ec.message().c_str());
    return 1;
  }
  // The tuning's own lines go to the terminal; each trial's launcher output to its run directory.
  std::FILE* out = ::fdopen(::dup(1), "w");
  if (out == nullptr) out = stdout;
  std::fprintf(out, "dtrain tune: %s: trials of %d warm-up + %d measured optimizer steps, %d repeat(s), budget "
                    "%.0f s; in %s\n", spec->name.c_str(), options.trial.warmup, options.trial.steps,
               options.repeats, options.budget_s, options.dir.c_str());
  std::fflush(out);
  block_termination_signals();
  controller::ControllerOptions copts;
  copts.self_exe = self_executable();
  copts.insecure = args.flags.insecure;
  copts.secret_dir = args.flags.secret_dir;
  tune::TrialLaunches launches(copts);
  on_termination_signal([&launches](int signal) { launches.signal(signal); });
  const std::uint64_t started_ms = unix_ms();
  tune::TuneResult result = tune::run_tuning(*spec, options, [&launches](const spec::Spec& s, auto deadline) {
    return launches.launch(s, deadline);
  }, out);
  on_termination_signal(nullptr);
  if (!result.message.empty() && result.results.front().trials.empty()) {
    std::fprintf(stderr, "dtrain tune: %s\n", result.message.c_str());
    return result.exit_code;
  }
  const int code = write_results(result, *spec, options, started_ms, out);
  if (out != stdout) std::fclose(out);
  return code;
}

}  // namespace

Action add_tune_command(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  auto* cmd = app.add_subcommand("tune", "Try the remedies for a job's measured bottleneck on the job itself, in "
                                         "short repeated trials, with no code change: a ranked table, the lines for "
                                         "the script and tune.yaml for --tune");
  cmd->add_option("--trial-steps", args->trial_steps, "optimizer steps measured in each trial")->capture_default_str();
  cmd->add_option("--warmup-steps", args->warmup_steps, "optimizer steps before a trial's measured ones")
      ->capture_default_str();
  cmd->add_option("--repeats", args->repeats, "trials of each configuration, interleaved")->capture_default_str();
  cmd->add_option("--budget", args->budget, "the most the tuning may take: 600, 90s, 10m, 1h")->capture_default_str();
  cmd->add_option("--parts", args->parts, "try the remedies for these parts of a step, and only these, whatever their "
                                          "share: data, communication, compute (comma-separated; default: every part "
                                          "of 10% of a step or more)")
      ->delimiter(',')
      ->check(CLI::IsMember({"data", "communication", "compute"}));
  cmd->add_option("--set", args->sets, "override a key of the job spec (JOB.yaml form; repeatable)");
  add_launch_flags(*cmd, args->flags);
  run::add_run_options(*cmd, args->run);
  return [args, cmd]() { return tune_command(*args, *cmd); };
}

}  // namespace dtrain::cli
