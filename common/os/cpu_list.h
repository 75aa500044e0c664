#pragma once

// CPU sets as people and the kernel write them (sysfs cpulist, taskset -c): "0-3,8,10-11".

#include <algorithm>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

namespace dtrain {

// {0,1,2,3,8,10,11} -> "0-3,8,10-11", in any order of `cpus`; "" for none.
inline std::string format_cpu_list(std::vector<unsigned> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}, in the text's order; malformed parts are skipped.
inline std::vector<unsigned> parse_cpu_list(const std::string& text) {
  std::vector<unsigned> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    unsigned lo = 0, hi = 0;
    char dash = 0;
    std::stringstream range(part);
    if (!(range >> lo)) continue;
    if (range >> dash) {
      if (dash != '-' || !(range >> hi) || hi < lo) continue;
    } else {
      hi = lo;
    }
    for (unsigned c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace dtrain
