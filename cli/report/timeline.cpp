#include "cli/report/timeline.h"

#include <algorithm>

#include "cli/report/svg.h"

namespace dtrain::report {
namespace {

constexpr double kTimelineLabelWidth = 130, kTimelinePlotWidth = 760, kLane = 22;

struct Lane {
  Mark::Kind kind;
  const char* label;
  const char* colour;
};
constexpr Lane kLanes[] = {{Mark::Kind::worker_failed, "worker failures", "#d62728"},
                           {Mark::Kind::node_lost, "node losses", "#9467bd"},
                           {Mark::Kind::hang, "hangs", "#8c564b"},
                           {Mark::Kind::diagnosis, "diagnoses", "#1f77b4"}};

const char* round_colour(const std::string& outcome) {
  if (outcome == "succeeded") return "#2ca02c";
  if (outcome.empty()) return "#bbbbbb";
  return outcome == "interrupted" ? "#ff7f0e" : "#d62728";
}

std::string lane_label(double y, const char* text) {
  return "<text x=\"" + coord(kTimelineLabelWidth - 6) + "\" y=\"" + coord(y + 14) + "\" text-anchor=\"end\">" + text +
         "</text>";
}

std::string rounds_lane(const RunModel& model, const Scale& x) {
  std::string out = lane_label(0, "rounds");
  for (const auto& r : model.rounds) {
    const std::uint64_t end = r.end_ms ? r.end_ms : model.end_ms;
    const double x0 = x((r.start_ms - std::min(r.start_ms, model.start_ms)) / 1000.0);
    const double x1 = std::max(x0 + 2, x((end - std::min(end, model.start_ms)) / 1000.0));
    out += "<g class=\"round\" data-round=\"" + std::to_string(r.number) + "\" data-outcome=\"" + escape(r.outcome) +
           "\"><title>round " + std::to_string(r.number) + ": " + escape(r.outcome.empty() ? "no end" : r.outcome) +
           (r.root_cause.empty() ? "" : " (" + escape(r.root_cause) + ")") + "</title><rect x=\"" + coord(x0) +
           "\" y=\"3\" width=\"" + coord(x1 - x0) + "\" height=\"16\" fill=\"" + round_colour(r.outcome) +
           "\"/><text x=\"" + coord(x0 + 3) + "\" y=\"15\" class=\"on-bar\">" + std::to_string(r.number) +
           "</text></g>";
  }
  return out;
}

std::string mark_lanes(const RunModel& model, const Scale& x) {
  std::string out;
  double y = kLane;
  for (const Lane& lane : kLanes) {
    out += lane_label(y, lane.label);
    for (const auto& m : model.marks) {
      if (m.kind != lane.kind) continue;
      const double at = x((m.ms - std::min(m.ms, model.start_ms)) / 1000.0);
      out += "<g class=\"mark\"><title>" + escape(m.text) + "</title><path d=\"M" + coord(at) + " " + coord(y + 3) +
             "l6 8l-6 8l-6 -8z\" fill=\"" + lane.colour + "\"/></g>";
    }
    y += kLane;
  }
  return out;
}

std::string mark_list(const RunModel& model) {
  if (model.marks.empty() && model.stacks_files.empty()) return "";
  std::string out = "<table class=\"marks\"><tr><th>at</th><th>round</th><th>what</th></tr>";
  for (std::size_t i = 0; i < model.marks.size() && i < kMaxListedMarks; ++i) {
    const Mark& m = model.marks[i];
    out += "<tr><td>" + duration_text(m.ms - std::min(m.ms, model.start_ms)) + "</td><td>" +
           std::to_string(m.round) + "</td><td>" + escape(m.text) + "</td></tr>";
  }
  out += "</table>";
  if (model.marks.size() > kMaxListedMarks) {
    out += "<p>" + std::to_string(model.marks.size() - kMaxListedMarks) +
           " more in events.jsonl.</p>";
  }
  if (!model.stacks_files.empty()) {
    out += "<p>Hang evidence (the stacks of every worker still running when a health check failed):</p><ul>";
    for (const auto& f : model.stacks_files) out += "<li><a href=\"" + escape(f) + "\">" + escape(f) + "</a></li>";
    out += "</ul>";
  }
  return out;
}

}  // namespace

std::string timeline(const RunModel& model) {
  const double span = std::max<std::uint64_t>(1, model.end_ms - std::min(model.end_ms, model.start_ms)) / 1000.0;
  const Scale x{0, span, kTimelineLabelWidth, kTimelineLabelWidth + kTimelinePlotWidth};
  const double height = kLane * 5;
  std::string out = "<svg class=\"chart timeline\" width=\"" + coord(kTimelineLabelWidth + kTimelinePlotWidth + 20) +
                    "\" height=\"" + coord(height + 40) + "\" role=\"img\">" + rounds_lane(model, x) +
                    mark_lanes(model, x) + x_axis(x, height, "seconds since the job started", 8) + "</svg>";
  return out + mark_list(model);
}

}  // namespace dtrain::report
