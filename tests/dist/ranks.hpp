// What the data-parallel tests share: each rank's part of a global batch,
// how far two trained states are apart, and their main.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dist/collectives.hpp"
#include "ir/verify.hpp"
#include "wholestep/wholestep.hpp"

namespace ws::test {

using State = std::vector<std::pair<std::string, Tensor>>;

struct Trained {
  State state;
  double loss = 0;
};

// Rows [r * n / W, (r + 1) * n / W) of every tensor: rank r's part of a
// global batch.
inline std::vector<Tensor> shard(const std::vector<Tensor>& global) {
  std::vector<Tensor> out;
  for (const Tensor& t : global) {
    const int64_t n = t.shape()[0], w = dist::world_size(), r = dist::rank();
    out.push_back(slice(t, 0, r * n / w, (r + 1) * n / w));
  }
  return out;
}

// How far a is from b over every tensor: max |a - b| / max |b|, and
// ||a - b|| / ||b|| (Euclidean norms).
struct Difference {
  double max = 0, norm = 0;
};

inline Difference relative_difference(const State& a, const State& b) {
  double diff = 0, scale = 0, diff2 = 0, scale2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const Tensor x = cast(a[i].second, DType::f64), y = cast(b[i].second, DType::f64);
    for (int64_t e = 0; e < x.numel(); ++e) {
      const double d = x.data<double>()[e] - y.data<double>()[e], v = y.data<double>()[e];
      diff = std::max(diff, std::abs(d));
      scale = std::max(scale, std::abs(v));
      diff2 += d * d;
      scale2 += v * v;
    }
  }
  return {diff / scale, std::sqrt(diff2 / scale2)};
}

// A data-parallel test program's main: graphs verified, MPI made ready
// for the progress thread, then the tests.
inline int run_tests_on_ranks(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ir::set_verify_enabled(true);
  dist::set_progress(dist::Progress::thread);
  dist::init();
  dist::set_progress(dist::Progress::kernels);
  return RUN_ALL_TESTS();
}

}  // namespace ws::test
