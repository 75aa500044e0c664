#pragma once

// Prometheus' text exposition format, version 0.0.4 (what `Content-Type: text/plain; version=0.0.4` promises):
//
//   # HELP dtrain_worker_step The latest step a rank reported.
//   # TYPE dtrain_worker_step gauge
//   dtrain_worker_step{job="tiny-gpt-20250101-120000",rank="0",node="0"} 41
//
// Each family's HELP and TYPE come once, before its samples, and a family's samples are contiguous: a scraper may
// refuse a family that appears twice. Label values are escaped (\\, \", \n), so a host or job name can never end
// a sample early; names are the program's own constants and are checked, not escaped.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrain::controller {

struct MetricSample {
  std::vector<std::pair<std::string, std::string>> labels;   // name, value; in the order written
  double value = 0;
};

struct MetricFamily {
  enum class Type { gauge, counter };
  std::string name;                  // [a-zA-Z_:][a-zA-Z0-9_:]*; a counter's ends in _total
  std::string help;                  // one line for people; escaped on output
  Type type = Type::gauge;
  std::vector<MetricSample> samples;  // none: the family is still described (HELP and TYPE), so a scraper knows it
};

// The families in order. Throws std::invalid_argument for a metric or label name the format does not allow (a
// programming error: every name is a constant of the launcher).
std::string format_prometheus(const std::vector<MetricFamily>& families);

// A label value with \, " and newline escaped as \\, \" and \n.
std::string escape_label_value(std::string_view value);
// A HELP text with \ and newline escaped as \\ and \n.
std::string escape_help(std::string_view help);
// A sample value as Prometheus spells it: NaN, +Inf, -Inf, else the shortest decimal that reads back as the same
// double (integers up to 2^53 without an exponent).
std::string format_sample_value(double value);

}  // namespace dtrain::controller
