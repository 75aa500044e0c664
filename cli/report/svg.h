#pragma once

// The few pieces every chart of the report page is drawn with: escaping, compact numbers, a linear scale with
// round ticks, and the page's colours. Charts are inline SVG elements written as text; nothing here draws.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::report {

// Text for HTML and SVG, attribute values included; control characters and bytes that are not UTF-8 become `\xNN`
// (common/io/terminal_text.h), newlines stay.
std::string escape(std::string_view text);
// A coordinate or a value: at most 1 decimal for coordinates keeps a 1,024-rank page within a few MB.
std::string coord(double value);
// A value for people: up to 4 significant digits below 10,000, then k/M with 3 ("12.3", "2000", "45.6k").
std::string pretty(double value);
std::string duration_text(std::uint64_t ms);
std::string mib_text(double mib);

// Maps [lo, hi] onto [from, to] (pixels; to < from for a y axis that grows upwards).
struct Scale {
  double lo = 0, hi = 1, from = 0, to = 1;
  double operator()(double value) const;
  // About `count` round values (1, 2 or 5 times a power of ten) inside [lo, hi].
  std::vector<double> ticks(int count) const;
};
// [lo, hi] widened to round numbers and never empty.
Scale nice_scale(double lo, double hi, double from, double to);

// Colour of a heat-map cell: t = 0 (fast) pale to t = 1 (slow) dark red, readable in print.
std::string heat_colour(double t);
// The colour of series i (rounds, the parts of a step); distinct in colour and in grey.
const char* series_colour(std::size_t i);

// An x or y axis with its ticks and label, for a plot in the box [x0, x1] x [y0, y1].
std::string x_axis(const Scale& x, double y, std::string_view label, int ticks);
std::string y_axis(const Scale& y, double x, std::string_view label, int ticks);

}  // namespace dtrain::report
