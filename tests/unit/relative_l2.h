#pragma once

// |a - b| / |b| over n floats, in double (|a - b| when b is all zeros): how far a split model's gradients are from the
// whole model's.

#include <cmath>
#include <cstddef>

inline double relative_l2(const float* a, const float* b, std::size_t n) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}
