#include "cli/report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/io/terminal_text.h"

namespace dtrain::report {

std::string escape(std::string_view text) {
  // Control characters are parse errors in HTML, and bytes that are not UTF-8 garble the page: both are written as
  // the launcher's terminal shows them (\x1b), by the one rule of common/io/terminal_text.h.
  const std::string safe = terminal_safe_lines(text);
  std::string out;
  out.reserve(safe.size());
  for (char c : safe) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string coord(double value) {
  char text[32];
  const double rounded = std::round(value * 10.0) / 10.0;
  if (rounded == std::floor(rounded)) {
    std::snprintf(text, sizeof text, "%.0f", rounded);
  } else {
    std::snprintf(text, sizeof text, "%.1f", rounded);
  }
  return text;
}

std::string pretty(double value) {
  char text[32];
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e6) {
    std::snprintf(text, sizeof text, "%.3gM", value / 1e6);
  } else if (magnitude >= 1e4) {
    std::snprintf(text, sizeof text, "%.3gk", value / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.4g", value);   // 2000, not 2e+03
  }
  return text;
}

std::string duration_text(std::uint64_t ms) {
  char text[48];
  const double s = ms / 1000.0;
  if (s < 60) {
    std::snprintf(text, sizeof text, "%.1f s", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%d min %02d s", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  } else {
    std::snprintf(text, sizeof text, "%d h %02d min", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  }
  return text;
}

std::string mib_text(double mib) {
  return mib >= 1024 ? pretty(mib / 1024) + " GiB" : pretty(mib) + " MiB";
}

double Scale::operator()(double value) const {
  return hi == lo ? from : from + (value - lo) / (hi - lo) * (to - from);
}

std::vector<double> Scale::ticks(int count) const {
  const double raw = (hi - lo) / std::max(1, count);
  const double power = std::pow(10.0, std::floor(std::log10(raw > 0 ? raw : 1)));
  const double step = raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power : raw / power < 7.5 ? 5 * power
                                                                                                       : 10 * power;
  std::vector<double> out;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push_back(v);
  return out;
}

Scale nice_scale(double lo, double hi, double from, double to) {
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  Scale s{lo, hi, from, to};
  const auto t = s.ticks(5);
  const double step = t.size() >= 2 ? t[1] - t[0] : (hi - lo);
  s.lo = std::floor(lo / step) * step;
  s.hi = std::ceil(hi / step) * step;
  return s;
}

std::string heat_colour(double t) {
  t = std::clamp(t, 0.0, 1.0);
  // Pale yellow -> orange -> dark red: lightness falls with t, so the order survives a grey printer.
  static constexpr int stops[3][3] = {{255, 247, 188}, {253, 141, 60}, {128, 0, 38}};
  const int i = t < 0.5 ? 0 : 1;
  const double f = t < 0.5 ? t * 2 : (t - 0.5) * 2;
  char text[8];
  std::snprintf(text, sizeof text, "#%02x%02x%02x",
                static_cast<int>(stops[i][0] + f * (stops[i + 1][0] - stops[i][0])),
                static_cast<int>(stops[i][1] + f * (stops[i + 1][1] - stops[i][1])),
                static_cast<int>(stops[i][2] + f * (stops[i + 1][2] - stops[i][2])));
  return text;
}

const char* series_colour(std::size_t i) {
  static constexpr const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                            "#8c564b", "#e377c2", "#7f7f7f"};
  return colours[i % (sizeof colours / sizeof colours[0])];
}

std::string x_axis(const Scale& x, double y, std::string_view label, int ticks) {
  std::string out = "<g class=\"axis\"><line x1=\"" + coord(x.from) + "\" x2=\"" + coord(x.to) + "\" y1=\"" +
                    coord(y) + "\" y2=\"" + coord(y) + "\"/>";
  for (double v : x.ticks(ticks)) {
    out += "<text x=\"" + coord(x(v)) + "\" y=\"" + coord(y + 14) + "\" text-anchor=\"middle\">" + pretty(v) +
           "</text>";
  }
  out += "<text x=\"" + coord((x.from + x.to) / 2) + "\" y=\"" + coord(y + 30) + "\" text-anchor=\"middle\">" +
         escape(label) + "</text></g>";
  return out;
}

std::string y_axis(const Scale& y, double x, std::string_view label, int ticks) {
  std::string out = "<g class=\"axis\"><line x1=\"" + coord(x) + "\" x2=\"" + coord(x) + "\" y1=\"" +
                    coord(y.from) + "\" y2=\"" + coord(y.to) + "\"/>";
  for (double v : y.ticks(ticks)) {
    out += "<text x=\"" + coord(x - 4) + "\" y=\"" + coord(y(v) + 4) + "\" text-anchor=\"end\">" + pretty(v) +
           "</text>";
  }
  out += "<text transform=\"translate(" + coord(x - 44) + " " + coord((y.from + y.to) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape(label) + "</text></g>";
  return out;
}

}  // namespace dtrain::report
