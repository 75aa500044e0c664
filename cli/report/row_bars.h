#pragma once

// Horizontal stacked bars, one per chart row (rows.h), with a legend: the shape of the step breakdown and the memory
// charts.

#include <string>
#include <vector>

#include "cli/report/rows.h"

namespace dtrain::report {

struct BarChart {
  std::string name;                       // data-chart attribute ("step-breakdown", "memory-host")
  std::string unit;                       // shown after the totals ("ms", "MiB")
  std::vector<std::string> parts;         // the legend, in stacking order
  std::vector<std::vector<double>> values;   // per row, one value per part (a row of all zeros draws no bar)
};

std::string row_bars(const ChartRows& rows, const BarChart& chart);

}  // namespace dtrain::report
