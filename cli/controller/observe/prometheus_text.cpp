#include "cli/controller/observe/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace dtrain::controller {
namespace {

bool name_char(char c, bool first, bool colon_ok) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
  return letter || (!first && c >= '0' && c <= '9');
}

void check_name(const std::string& name, bool colon_ok, const char* what) {
  bool ok = !name.empty();
  for (std::size_t i = 0; ok && i < name.size(); ++i) ok = name_char(name[i], i == 0, colon_ok);
  // Names starting with __ are reserved for Prometheus' own labels.
  if (!ok || (!colon_ok && name.starts_with("__"))) {
    throw std::invalid_argument(std::string(what) + " '" + name + "' is not allowed in Prometheus' text format");
  }
}

const char* type_name(MetricFamily::Type type) {
  switch (type) {
    case MetricFamily::Type::gauge: return "gauge";
    case MetricFamily::Type::counter: return "counter";
  }
  return "untyped";
}

// The format's one escape rule: backslash and newline everywhere, the double quote inside label values.
std::string escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
  return out;
}

}  // namespace

std::string escape_label_value(std::string_view value) { return escape(value, true); }

std::string escape_help(std::string_view help) { return escape(help, false); }

std::string format_sample_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Shortest round trip: 0.1 stays 0.1, a step counter stays an integer, and nothing is lost to rounding.
  char buffer[64];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return error == std::errc() ? std::string(buffer, end) : "NaN";
}

std::string format_prometheus(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const auto& family : families) {
    check_name(family.name, true, "metric name");
    out += "# HELP " + family.name + " " + escape_help(family.help) + "\n";
    out += "# TYPE " + family.name + " " + type_name(family.type) + "\n";
    for (const auto& sample : family.samples) {
      out += family.name;
      if (!sample.labels.empty()) {
        out += '{';
        for (std::size_t i = 0; i < sample.labels.size(); ++i) {
          const auto& [name, value] = sample.labels[i];
          check_name(name, false, "label name");
          if (i > 0) out += ',';
          out += name + "=\"" + escape_label_value(value) + "\"";
        }
        out += '}';
      }
      out += ' ' + format_sample_value(sample.value) + '\n';
    }
  }
  return out;
}

}  // namespace dtrain::controller
