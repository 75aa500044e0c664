#pragma once

// CPU sets as people and the kernel write them (sysfs cpulist, taskset -c): "0-3,8,10-11".

#include <algorithm>
#include <cstddef>
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

}  // namespace dtrain
