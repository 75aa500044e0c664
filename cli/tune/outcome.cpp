// The recommendation, the verdict, the lines and the suggestions (outcome.h).

#include "cli/tune/outcome.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/plan/measured/measured_run.h"
#include "cli/plan/measured/remedies.h"
#include "cli/tune/measure.h"

namespace dtrain::tune {
namespace {

std::string fixed(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string interval_text(const SpeedUp& s) {
  return fixed("%.2fx", s.ratio) + " [" + fixed("%.2f", s.low) + ", " + fixed("%.2f", s.high) + "]";
}

std::string bool_text(bool value) { return value ? "True" : "False"; }

// The remedies plan gives for the baseline's run that tune does not try.
std::vector<std::string> suggestions_for(const TuneResult& r) {
  std::vector<std::string> out;
  const auto& base = r.results.front();
  if (base.trials.empty() || base.trials.front().run_dir.empty()) return out;
  const auto advice = plan::advise_from_run(base.trials.front().run_dir);
  if (!advice.ok()) return out;
  for (const auto& remedy : advice.value.remedies) {
    const std::string& w = remedy.what;
    if (w.rfind("load batches", 0) == 0 || w.rfind("smaller gradient buckets", 0) == 0 ||
        w.rfind("the trainer's loader", 0) == 0) {
      continue;
    }
    std::string text = w;
    if (remedy.is_memory()) text += " (frees up to " + plan::bytes_text(remedy.frees_bytes) + " a rank)";
    else if (remedy.gain_ms > 0) text += " (`dtrain plan --from` predicts up to " + fixed("%.1f", remedy.gain_ms) +
                                         " ms of a " + fixed("%.1f", advice.value.run.step_ms) + " ms step)";
    if (!remedy.lines.empty()) text += ": " + remedy.lines.front();
    out.push_back(std::move(text));
  }
  return out;
}

std::string no_candidate_verdict(const JobFacts& f) {
  return "The job is already tuned for what dtrain can change without changing its numerics: data wait is " +
         fixed("%.0f%%", f.data_share * 100) + " and exposed communication " + fixed("%.0f%%", f.comm_share * 100) +
         " of a step (a part under 10% gets no candidate)" +
         (f.cpus > 0 && f.threads == f.cpus ? ", and it runs one thread per CPU it may use" : "") +
         ". Nothing is recommended.";
}

std::string verdict_for(const TuneResult& r) {
  const auto& base = r.results.front();
  if (r.recommended > 0) {
    const auto& c = r.results[static_cast<std::size_t>(r.recommended)];
    return c.candidate.name + " is " + fixed("%.2fx", c.speed.ratio) + " as fast as the job as it is (95% interval " +
           fixed("%.2f", c.speed.low) + " to " + fixed("%.2f", c.speed.high) + "): " + fixed("%.4g", c.rate) + " " +
           r.unit + "/s against " + fixed("%.4g", base.rate) + ", losses " +
           (c.loss_check == "same" ? "the same." : "not checked (the baseline's own differ).");
  }
  if (r.results.size() == 1) return no_candidate_verdict(r.facts);
  const CandidateResult* best = nullptr;
  for (std::size_t i = 1; i < r.results.size(); ++i) {
    const auto& c = r.results[i];
    if (c.trials.empty()) continue;
    if (best == nullptr || c.speed.ratio > best->speed.ratio) best = &c;
  }
  if (best == nullptr) return "No candidate could be measured (see the table). Nothing is recommended.";
  return "No candidate was faster beyond the noise (the best, " + best->candidate.name + ": " +
         interval_text(best->speed) + "): the job is already tuned for what dtrain can change without changing its "
         "numerics. Nothing is recommended.";
}

void add_row(std::string& out, const std::string& rank, int width, const TuneResult& r, const CandidateResult& c) {
  const bool base = &c == &r.results.front();
  std::string speed = base ? "1 (baseline)" : c.trials.empty() ? "-" : interval_text(c.speed);
  std::string data = c.trials.empty() ? "-" : fixed("%.2f ms", median_of(c.trials, &TrialMeasure::data_wait_ms));
  std::string comm = c.trials.empty() ? "-" : fixed("%.2f ms", median_of(c.trials, &TrialMeasure::comm_ms));
  std::string memory = c.trials.empty() ? "-" : plan::bytes_text(static_cast<std::uint64_t>(
                                                    c.trials.front().memory_bytes));
  std::string status = c.status + (&c == &r.results[static_cast<std::size_t>(std::max(r.recommended, 0))] &&
                                           r.recommended > 0 ? ", recommended" : "");
  char line[512];
  std::snprintf(line, sizeof line, "  %-4s %-*s %12s  %-22s %10s %12s %9s  %-8s %s\n", rank.c_str(), width,
                c.candidate.name.c_str(), c.trials.empty() ? "-" : fixed(c.rate >= 100 ? "%.0f" : "%.3g", c.rate).c_str(), speed.c_str(),
                data.c_str(), comm.c_str(), memory.c_str(), base ? "-" : c.loss_check.c_str(), status.c_str());
  out += line;
}

}  // namespace

std::vector<std::size_t> ranked(const TuneResult& r) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < r.results.size(); ++i) order.push_back(i);
  auto key = [&r](std::size_t i) {
    const auto& c = r.results[i];
    if (static_cast<int>(i) == r.recommended) return 3.0e9;
    if (i == 0) return 2.0e9;   // the baseline after the recommendation: the row everything is compared with
    return c.trials.empty() ? -1.0 : c.speed.ratio + (c.status == "measured" ? 1.0e6 : 0.0);
  };
  std::stable_sort(order.begin(), order.end(), [&key](std::size_t a, std::size_t b) { return key(a) > key(b); });
  return order;
}

Conclusion conclude(TuneResult& r, const spec::Spec& spec) {
  CandidateResult& base = r.results.front();
  bool seeded = true;
  for (std::size_t i = 1; i < base.trials.size(); ++i) {
    seeded = seeded && losses_agree(base.trials[i], base.trials.front());
  }
  for (auto& c : r.results) judge(c, base, seeded);
  base.loss_check = seeded ? "same" : "n/a";
  if (!seeded) base.note = "its own trials' first losses differ (is the script seeded?): no loss check";
  r.recommended = -1;
  for (std::size_t i = 1; i < r.results.size(); ++i) {
    const auto& c = r.results[i];
    if (c.status != "measured" || !c.speed.faster()) continue;
    if (r.recommended < 0 || c.speed.ratio > r.results[static_cast<std::size_t>(r.recommended)].speed.ratio) {
      r.recommended = static_cast<int>(i);
    }
  }
  Conclusion out;
  out.verdict = verdict_for(r);
  if (base.trials.size() < 2 && r.results.size() > 1) {
    out.verdict += " (One baseline trial: the intervals leave out how much trials differ from each other; "
                   "--repeats 3 or more for a claim that does not.)";
  }
  out.suggestions = suggestions_for(r);
  if (r.recommended > 0) {
    const auto& c = r.results[static_cast<std::size_t>(r.recommended)];
    out.lines = candidate_lines(c.candidate, spec);
    const Overlay& o = c.candidate.overlay;
    if (has_python_knobs(o) || !o.env.empty() || o.binding) out.tune_yaml = overlay_yaml(c);
  }
  return out;
}

std::vector<std::string> candidate_lines(const Candidate& c, const spec::Spec& spec) {
  std::vector<std::string> lines;
  if (!c.args.empty() || !c.env.empty()) {
    std::string command;
    for (const auto& word : with_flags(spec.command, c.args)) command += (command.empty() ? "" : " ") + word;
    for (const auto& [name, value] : c.env) lines.push_back("env: {" + name + ": " + value + "}   # the job spec");
    lines.push_back("command: " + command);
    return lines;
  }
  const auto& d = c.overlay.dataloader;
  std::string loader;
  if (d.num_workers) loader += ", num_workers=" + std::to_string(*d.num_workers);
  if (d.pin_memory) loader += ", pin_memory=" + bool_text(*d.pin_memory);
  if (d.prefetch_factor) loader += ", prefetch_factor=" + std::to_string(*d.prefetch_factor);
  if (d.persistent_workers) loader += ", persistent_workers=" + bool_text(*d.persistent_workers);
  if (!loader.empty()) lines.push_back("DataLoader(dataset, ..." + loader + ")");
  std::string ddp;
  if (c.overlay.ddp.bucket_cap_mb) ddp += ", bucket_cap_mb=" + fixed("%g", *c.overlay.ddp.bucket_cap_mb);
  if (c.overlay.ddp.gradient_as_bucket_view) {
    ddp += ", gradient_as_bucket_view=" + bool_text(*c.overlay.ddp.gradient_as_bucket_view);
  }
  if (!ddp.empty()) lines.push_back("DistributedDataParallel(model, ..." + ddp + ")");
  if (c.overlay.intra_op_threads) {
    lines.push_back("torch.set_num_threads(" + std::to_string(*c.overlay.intra_op_threads) + ")");
  }
  for (const auto& [name, value] : c.overlay.env) lines.push_back(name + "=" + value + "   # the job's env");
  if (c.overlay.binding) {
    lines.push_back("binding: " + std::string(spec::to_string(*c.overlay.binding)) +
                    "   # the job spec (dtrain run: in tune.yaml)");
  }
  return lines;
}

std::string overlay_yaml(const CandidateResult& c) {
  const auto& o = c.candidate.overlay;
  std::string out = "# dtrain tune: " + c.candidate.name + ", " + interval_text(c.speed) +
                    " (95% interval) over the job as it is.\n# Use: dtrain run --tune tune.yaml ... | dtrain launch "
                    "--tune tune.yaml JOB.yaml\ntune:\n";
  std::string loader;
  auto add = [](std::string& to, const std::string& item) { to += (to.empty() ? "" : ", ") + item; };
  if (o.dataloader.num_workers) add(loader, "num_workers: " + std::to_string(*o.dataloader.num_workers));
  if (o.dataloader.pin_memory) add(loader, std::string("pin_memory: ") + (*o.dataloader.pin_memory ? "true" : "false"));
  if (o.dataloader.prefetch_factor) add(loader, "prefetch_factor: " + std::to_string(*o.dataloader.prefetch_factor));
  if (o.dataloader.persistent_workers) {
    add(loader, std::string("persistent_workers: ") + (*o.dataloader.persistent_workers ? "true" : "false"));
  }
  if (!loader.empty()) out += "  dataloader: {" + loader + "}\n";
  std::string ddp;
  if (o.ddp.bucket_cap_mb) add(ddp, "bucket_cap_mb: " + fixed("%g", *o.ddp.bucket_cap_mb));
  if (o.ddp.gradient_as_bucket_view) {
    add(ddp, std::string("gradient_as_bucket_view: ") + (*o.ddp.gradient_as_bucket_view ? "true" : "false"));
  }
  if (!ddp.empty()) out += "  ddp: {" + ddp + "}\n";
  if (o.intra_op_threads) out += "  threads: {intra_op: " + std::to_string(*o.intra_op_threads) + "}\n";
  if (o.binding) out += "  binding: " + std::string(spec::to_string(*o.binding)) + "\n";
  if (!o.env.empty()) {
    out += "  env:\n";
    for (const auto& [name, value] : o.env) out += "    " + name + ": \"" + value + "\"\n";
  }
  return out;
}

std::string render_table(const TuneResult& r) {
  std::string out;
  std::size_t width = 10;
  for (const auto& c : r.results) width = std::max(width, std::min<std::size_t>(c.candidate.name.size(), 60));
  const int w = static_cast<int>(width);
  char head[512];
  std::snprintf(head, sizeof head, "  %-4s %-*s %12s  %-22s %10s %12s %9s  %-8s %s\n", "rank", w, "knobs",
                (r.unit + "/s").c_str(), "speed-up [95% CI]", "data wait", "exposed comm", "memory", "losses",
                "status");
  out += head;
  int n = 0;
  for (std::size_t i : ranked(r)) {
    const auto& c = r.results[i];
    add_row(out, i == 0 ? "-" : std::to_string(++n), w, r, c);
    if (!c.note.empty() && c.status != "measured") out += "         " + c.note + "\n";
  }
  return out;
}

}  // namespace dtrain::tune
