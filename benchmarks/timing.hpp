// The clock and the median the alternating micro-benchmarks share.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace ws::bench {

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace ws::bench
