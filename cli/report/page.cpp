#include "cli/report/page.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "cli/report/heat_map.h"
#include "cli/report/progress_chart.h"
#include "cli/report/rank_summaries.h"
#include "cli/report/rows.h"
#include "cli/report/svg.h"
#include "cli/report/timeline.h"

namespace dtrain::report {
namespace {

constexpr const char* kStyle = R"(
body { font: 13px/1.4 "DejaVu Sans", sans-serif; color: #222; margin: 16px 24px; max-width: 1040px; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin: 20px 0 6px; border-bottom: 1px solid #ccc; }
table.summary td { padding: 1px 12px 1px 0; vertical-align: top; } table.summary td:first-child { color: #666; }
.outcome-succeeded { color: #2ca02c; font-weight: bold; } .outcome-failed, .outcome-unknown { color: #d62728;
  font-weight: bold; }
code { font: 12px "DejaVu Sans Mono", monospace; background: #f4f4f4; padding: 0 3px; }
svg.chart { display: block; margin: 4px 0; } svg text { font: 10px "DejaVu Sans", sans-serif; fill: #333; }
.axis line { stroke: #888; } polyline.line { fill: none; stroke-width: 1.5; }
rect.straggler { fill: none; stroke: #000; stroke-width: 2; } text.small { font-size: 7px; }
text.on-bar { fill: #fff; } .pair { display: flex; flex-wrap: wrap; gap: 8px; }
.diagnosis { border-left: 4px solid #d62728; padding: 2px 8px; margin: 6px 0; background: #fafafa; }
.diagnosis .fix { color: #333; } table.marks { border-collapse: collapse; font-size: 12px; }
table.marks td, table.marks th { border-bottom: 1px solid #eee; padding: 1px 8px 1px 0; text-align: left; }
p.note { color: #555; font-style: italic; } .empty { color: #888; }
@media print { body { margin: 0; } section { break-inside: avoid; } a { color: inherit; } }
)";

std::string utc_text(std::uint64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

std::string root_cause(const RunModel& model) {
  for (auto it = model.rounds.rbegin(); it != model.rounds.rend(); ++it) {
    if (!it->root_cause.empty()) return it->root_cause;
  }
  return "";
}

// "12.3 TFLOP/s (exact), MFU 41.2% of the dense bf16/fp16 peak of h100-sxm", or "" when the run has none.
std::string model_flops_text(const ModelFlopsInfo& flops) {
  if (!flops.flops_per_s) return "";
  char text[64];
  std::snprintf(text, sizeof text, "%.3g TFLOP/s", *flops.flops_per_s / 1e12);
  std::string out = std::string(text) + " (" + escape(flops.flops_basis) + ")";
  if (!flops.mfu) return out + ", MFU not known (no peak for the ranks' device)";
  std::snprintf(text, sizeof text, "%.1f%%", *flops.mfu * 100);
  return out + ", <span id=\"mfu\">MFU " + text + "</span> of the " + escape(flops.peak_basis);
}

std::string header(const RunModel& model) {
  std::size_t nodes = 0;
  for (const auto& r : model.rounds) nodes = std::max(nodes, r.nodes);
  std::string command;
  for (const auto& arg : model.command) command += (command.empty() ? "" : " ") + arg;
  std::string outcome = "<span class=\"outcome-" + escape(model.outcome) + "\">" + escape(model.outcome) + "</span>";
  if (model.outcome != "unknown") outcome += " (exit code " + std::to_string(model.exit_code) + ")";
  if (model.outcome == "unknown") outcome += " (no job_end in the log: the launcher was killed, or it still runs)";
  const std::string cause = root_cause(model);
  std::string out = "<header><h1>dtrain job " + escape(model.job_id) + "</h1><table class=\"summary\">";
  const auto row = [&](const std::string& key, const std::string& value) {
    out += "<tr><td>" + key + "</td><td>" + value + "</td></tr>";
  };
  row("outcome", outcome);
  if (!cause.empty()) row("root cause", "<span class=\"root-cause\">" + escape(cause) + "</span>");
  row("nodes, ranks", std::to_string(nodes) + " nodes, " + std::to_string(model.ranks()) + " ranks");
  if (!command.empty()) row("command", "<code>" + escape(command) + "</code>");
  row("restarts", std::to_string(model.restarts()));
  if (const std::string flops = model_flops_text(model.model_flops); !flops.empty()) {
    row("model FLOP/s", flops + " (the ranks' last reported rates)");
  }
  row("wall time", duration_text(model.end_ms - std::min(model.end_ms, model.start_ms)) + ", from " +
                       utc_text(model.start_ms));
  row("run directory", "<code>" + escape(model.dir) + "</code>");
  return out + "</table></header>";
}

std::string diagnoses(const RunModel& model) {
  if (model.diagnoses.empty()) return "<p class=\"empty\">No diagnosis: no rank stood out, and no bottleneck.</p>";
  std::string out;
  for (const auto& d : model.diagnoses) {
    out += "<div class=\"diagnosis\" data-kind=\"" + escape(d.kind) + "\"><b>" + escape(d.kind) + "</b>: " +
           escape(d.message) + "<div class=\"fix\">fix: " + escape(d.fix) + "</div></div>";
  }
  return out;
}

std::string section(const std::string& id, const std::string& title, const std::string& body,
                    const std::string& when_empty) {
  return "<section id=\"" + id + "\"><h2>" + title + "</h2>" +
         (body.empty() ? "<p class=\"empty\">" + when_empty + "</p>" : body) + "</section>";
}

// The document up to its body: the policy that forbids loading anything, the title, the style.
std::string page_start(const std::string& title) {
  return "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
         "style-src 'unsafe-inline'\"><title>" + escape(title) + "</title><style>" + kStyle + "</style></head><body>";
}

}  // namespace

std::string render_page(const RunModel& model, const std::string& after_header) {
  const ChartRows rows = chart_rows(model);
  const std::string none = "No rank reported this (workers report through dtrain-trainer or the Python helper "
                           "dtrain_health; see Worker health in README.md).";
  std::string out = page_start("dtrain report: " + model.job_id) + header(model) + after_header;
  if (rows.by_node) out += "<p class=\"note\" id=\"aggregated\">" + escape(rows.note()) + "</p>";
  const std::string loss = progress_chart(model, Progress::loss);
  const std::string tokens = progress_chart(model, Progress::tokens_per_s);
  out += section("progress", "Loss and throughput",
                 loss.empty() && tokens.empty() ? "" : "<div class=\"pair\">" + loss + tokens + "</div>", none);
  const std::string heat = heat_map(model, rows);
  out += section("heat-map", "Own step time per " + std::string(rows.by_node ? "node" : "rank") + " over time",
                 heat.empty() ? ""
                              : "<p>Each cell: the step time less exposed communication and a pipeline stage's "
                                "bubble (in data-parallel training every step waits for the slowest rank, so this is "
                                "what tells the ranks apart). "
                                "Outlined: stragglers.</p>" + heat,
                 none);
  out += section("breakdown", "Where the step went", step_breakdown(model, rows), none);
  out += section("timeline", "Timeline", timeline(model), "");
  out += section("diagnoses", "Diagnoses", diagnoses(model), "");
  out += section("memory", "Memory", memory_charts(model, rows), none);
  return out + "</body></html>\n";
}

std::string render_bare_page(const std::string& title, const std::string& body) {
  return page_start(title) + body + "</body></html>\n";
}

}  // namespace dtrain::report
