// The neural-network kernels: reference convolution against an independent
// formulation and hand-computed values, gradients through the adjoint
// identity (the f32 backend convolutions: dnnl_backend_test.cpp), pooling on
// hand-computed examples, gather/scatter and their index errors, and Philox
// against Random123's known answers.
#include "exec/nn_kernels.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "exec/conv_cases.hpp"
#include "exec/threads.hpp"
#include "test_util.hpp"

namespace ws::exec {
namespace {

// ---------------------------------------------------------------------------
// Reference convolution.

TEST(Conv2dRef, HandComputedSumsWithPadding) {
  // 3x3 input 1..9, 2x2 kernel of ones, padding 1: each output is the sum of
  // the input elements under the window.
  const Conv2dGeom g = conv_geom(1, 1, 3, 3, 1, 2, 2, 1, 1, 1, 1);
  ASSERT_EQ(g.oh, 4);
  const Vec x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 1, 1, 1};
  Vec y(16);
  conv2d_ref(g, x.data(), w.data(), y.data());
  EXPECT_EQ(y, (Vec{1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9}));
}

TEST(Conv2dRef, HandComputedStrideDilationAndGroups) {
  // Two groups of one channel each. Group 0 (x = 1..16) has a dilated 2x2
  // kernel picking the corners of a 3x3 patch, stride 2; group 1 (x = 100 +
  // ...) has a kernel of -1 at (0, 0) only.
  const Conv2dGeom g = conv_geom(1, 2, 4, 4, 2, 2, 2, 2, 2, 0, 0, 2, 2, 2);
  ASSERT_EQ(g.oh, 1);
  ASSERT_EQ(g.ow, 1);
  Vec x(32);
  for (int i = 0; i < 16; ++i) x[size_t(i)] = i + 1, x[size_t(16 + i)] = 100 + i;
  const Vec w = {1, 1, 1, 1, -1, 0, 0, 0};
  Vec y(2);
  conv2d_ref(g, x.data(), w.data(), y.data());
  EXPECT_EQ(y[0], 1 + 3 + 9 + 11);
  EXPECT_EQ(y[1], -100);
}

TEST(Conv2dRef, MatchesDirectDefinitionWithStridePaddingDilationGroups) {
  std::mt19937 rng(1);
  for (const Conv2dGeom& g : conv_geometries()) {
    const Vec x = random_vec(x_size(g), rng), w = random_vec(w_size(g), rng);
    Vec y(size_t(y_size(g)), 0.0);
    conv2d_ref(g, x.data(), w.data(), y.data());
    const Vec want = conv_by_padding(g, x, w);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], want[i], 1e-12) << describe(g) << " at element " << i;
  }
}

TEST(Conv2dRef, GradientsSatisfyAdjointIdentity) {
  // conv is bilinear, so <conv(x, w), dy> == <x, dx(dy, w)> == <w, dw(x, dy)>.
  std::mt19937 rng(2);
  std::vector<Conv2dGeom> geometries = conv_geometries();
  for (const Conv2dGeom& g : conv3d_geometries()) geometries.push_back(g);
  for (const Conv2dGeom& g : geometries) {
    const Vec x = random_vec(x_size(g), rng), w = random_vec(w_size(g), rng);
    const Vec dy = random_vec(y_size(g), rng);
    Vec y(size_t(y_size(g))), dx(size_t(x_size(g)), 7.0), dw(size_t(w_size(g)), 7.0);
    conv2d_ref(g, x.data(), w.data(), y.data());
    conv2d_input_grad_ref(g, dy.data(), w.data(), dx.data());
    conv2d_weight_grad_ref(g, x.data(), dy.data(), dw.data());
    const double lhs = dot(y, dy);
    EXPECT_NEAR(dot(x, dx), lhs, 1e-11 * (1 + std::abs(lhs))) << describe(g);
    EXPECT_NEAR(dot(w, dw), lhs, 1e-11 * (1 + std::abs(lhs))) << describe(g);
  }
}

// A 3-d convolution is the sum over the kernel's depth offsets of 2-d
// convolutions of the input's depth planes (zeros where a plane is padding).
TEST(Conv2dRef, ThreeDimensionalIsASumOfPlanarConvolutions) {
  std::mt19937 rng(5);
  for (const Conv2dGeom& g : conv3d_geometries()) {
    const Vec x = random_vec(x_size(g), rng), w = random_vec(w_size(g), rng);
    Vec y(size_t(y_size(g)), 0.0);
    conv2d_ref(g, x.data(), w.data(), y.data());
    Conv2dGeom plane = g;  // the 2-d convolution of one depth plane
    plane.volume = false, plane.d = plane.kd = plane.od = 1, plane.pd = 0;
    plane.n = 1;
    const int64_t cg = g.c / g.groups, hw = g.h * g.w, ohw = g.oh * g.ow;
    Vec want(y.size(), 0.0);
    for (int64_t b = 0; b < g.n; ++b)
      for (int64_t oz = 0; oz < g.od; ++oz)
        for (int64_t kz = 0; kz < g.kd; ++kz) {
          const int64_t iz = oz * g.sd - g.pd + kz * g.dd;
          if (iz < 0 || iz >= g.d) continue;
          Vec xp(size_t(g.c * hw)), wp(size_t(g.o * cg * g.kh * g.kw));
          for (int64_t c = 0; c < g.c; ++c)
            std::copy_n(x.begin() + ((b * g.c + c) * g.d + iz) * hw, hw, xp.begin() + c * hw);
          for (int64_t oi = 0; oi < g.o * cg; ++oi)
            std::copy_n(w.begin() + (oi * g.kd + kz) * g.kh * g.kw, g.kh * g.kw,
                        wp.begin() + oi * g.kh * g.kw);
          const Vec yp = conv_by_padding(plane, xp, wp);
          for (int64_t o = 0; o < g.o; ++o)
            for (int64_t i = 0; i < ohw; ++i)
              want[size_t(((b * g.o + o) * g.od + oz) * ohw + i)] += yp[size_t(o * ohw + i)];
        }
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], want[i], 1e-12) << describe(g) << " at element " << i;
  }
}

TEST(Conv2dRef, FloatInstantiationAgreesWithDouble) {
  std::mt19937 rng(3);
  const Conv2dGeom g = conv_geom(2, 4, 6, 5, 4, 3, 3, 2, 1, 1, 1, 1, 1, 2);
  const Vec x = random_vec(x_size(g), rng), w = random_vec(w_size(g), rng);
  Vec y(size_t(y_size(g)));
  std::vector<float> yf(y.size());
  conv2d_ref(g, x.data(), w.data(), y.data());
  conv2d_ref(g, to_f32(x).data(), to_f32(w).data(), yf.data());
  expect_close(yf, y, 1e-5, "conv2d_ref<float>");
}

// ---------------------------------------------------------------------------
// Pooling.

Pool2dGeom pool_geom(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh,
                     int64_t sw, int64_t ph = 0, int64_t pw = 0, bool count_include_pad = true) {
  Pool2dGeom g{.n = n, .c = c, .h = h, .w = w, .kh = kh, .kw = kw};
  g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.count_include_pad = count_include_pad;
  g.oh = (h + 2 * ph - kh) / sh + 1;
  g.ow = (w + 2 * pw - kw) / sw + 1;
  return g;
}

int64_t in_size(const Pool2dGeom& g) { return g.n * g.c * g.h * g.w; }
int64_t out_size(const Pool2dGeom& g) { return g.n * g.c * g.oh * g.ow; }

const Vec kOneToNine = {1, 2, 3, 4, 5, 6, 7, 8, 9};

TEST(MaxPool2d, HandComputedOverlappingWindows) {
  const Pool2dGeom g = pool_geom(1, 1, 3, 3, 2, 2, 1, 1);
  Vec y(4);
  max_pool2d_ref(g, kOneToNine.data(), y.data());
  EXPECT_EQ(y, (Vec{5, 6, 8, 9}));
}

TEST(MaxPool2d, PaddingActsAsNegativeInfinity) {
  // All-negative input: a padded border must not contribute zeros.
  const Pool2dGeom g = pool_geom(1, 1, 3, 3, 3, 3, 2, 2, 1, 1);
  ASSERT_EQ(g.oh, 2);
  Vec x(9);
  for (size_t i = 0; i < 9; ++i) x[i] = -double(i + 1);
  Vec y(4);
  max_pool2d_ref(g, x.data(), y.data());
  // Windows cover rows/cols [-1, 2) and [1, 4); in the image, {0, 1} and {1, 2}.
  EXPECT_EQ(y, (Vec{-1, -2, -4, -5}));
}

TEST(MaxPool2d, NanPropagates) {
  const Pool2dGeom g = pool_geom(1, 1, 2, 4, 2, 2, 2, 2);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Vec x = {1, nan, 5, 6, 2, 3, 7, 8};
  Vec y(2);
  max_pool2d_ref(g, x.data(), y.data());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 8);
}

TEST(MaxPool2d, GradientGoesToFirstMaximumOnTies) {
  // All equal: every window's first element (row-major) gets its gradient.
  const Pool2dGeom g = pool_geom(1, 1, 3, 3, 2, 2, 1, 1);
  const Vec x(9, 1.0), dy = {1, 10, 100, 1000};
  Vec dx(9, -1.0);
  max_pool2d_grad_ref(g, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (Vec{1, 10, 0, 100, 1000, 0, 0, 0, 0}));
  // A tie inside one window: 4 at (0, 1) and (1, 0); (0, 1) comes first.
  const Pool2dGeom g1 = pool_geom(1, 1, 2, 2, 2, 2, 1, 1);
  const Vec x1 = {0, 4, 4, 1}, dy1 = {3};
  Vec dx1(4);
  max_pool2d_grad_ref(g1, x1.data(), dy1.data(), dx1.data());
  EXPECT_EQ(dx1, (Vec{0, 3, 0, 0}));
}

TEST(MaxPool2d, OverlappingWindowsAddGradients) {
  // The centre is the maximum of all four 2x2 windows of a 3x3 plane.
  const Pool2dGeom g = pool_geom(1, 1, 3, 3, 2, 2, 1, 1);
  const Vec x = {0, 0, 0, 0, 9, 0, 0, 0, 0}, dy = {1, 2, 3, 4};
  Vec dx(9);
  max_pool2d_grad_ref(g, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (Vec{0, 0, 0, 0, 10, 0, 0, 0, 0}));
}

TEST(MaxPool2d, GradientMatchesFiniteDifferences) {
  // Random distinct values: max pooling is locally linear, so central
  // differences are exact up to rounding.
  std::mt19937 rng(7);
  const Pool2dGeom g = pool_geom(2, 3, 7, 6, 3, 2, 2, 1, 1, 1);
  const Vec x = random_vec(in_size(g), rng), dy = random_vec(out_size(g), rng);
  Vec dx(x.size());
  max_pool2d_grad_ref(g, x.data(), dy.data(), dx.data());
  auto loss = [&](const Vec& xv) {
    Vec y(size_t(out_size(g)));
    max_pool2d_ref(g, xv.data(), y.data());
    return dot(y, dy);
  };
  const double eps = 1e-7;
  for (size_t i = 0; i < x.size(); ++i) {
    Vec xp = x, xm = x;
    xp[i] += eps, xm[i] -= eps;
    EXPECT_NEAR((loss(xp) - loss(xm)) / (2 * eps), dx[i], 1e-6) << "element " << i;
  }
}

TEST(AvgPool2d, CountIncludePadDividesByPaddedWindow) {
  const Pool2dGeom g = pool_geom(1, 1, 3, 3, 3, 3, 1, 1, 1, 1, true);
  Vec y(9);
  avg_pool2d_ref(g, kOneToNine.data(), y.data());
  const Vec want = {12.0 / 9, 21.0 / 9, 16.0 / 9, 27.0 / 9, 45.0 / 9,
                    33.0 / 9, 24.0 / 9, 39.0 / 9, 28.0 / 9};
  for (size_t i = 0; i < 9; ++i) EXPECT_DOUBLE_EQ(y[i], want[i]) << i;
}

TEST(AvgPool2d, ExcludingPadDividesByInImageCount) {
  const Pool2dGeom g = pool_geom(1, 1, 3, 3, 3, 3, 1, 1, 1, 1, false);
  Vec y(9);
  avg_pool2d_ref(g, kOneToNine.data(), y.data());
  const Vec want = {12.0 / 4, 21.0 / 6, 16.0 / 4, 27.0 / 6, 45.0 / 9,
                    33.0 / 6, 24.0 / 4, 39.0 / 6, 28.0 / 4};
  for (size_t i = 0; i < 9; ++i) EXPECT_DOUBLE_EQ(y[i], want[i]) << i;
}

TEST(AvgPool2d, NonSquareStridedWithPadding) {
  // 2x4 plane, 2x3 windows, stride (1, 2), padding (1, 1): oh = 3, ow = 2.
  const Vec x = {1, 2, 3, 4, 5, 6, 7, 8};
  for (bool include : {true, false}) {
    const Pool2dGeom g = pool_geom(1, 1, 2, 4, 2, 3, 1, 2, 1, 1, include);
    ASSERT_EQ(g.oh, 3);
    ASSERT_EQ(g.ow, 2);
    Vec y(6);
    avg_pool2d_ref(g, x.data(), y.data());
    // Window (0, 0): rows {0}, cols {0, 1}: 1+2 = 3 over 2 in-image.
    // Window (0, 1): rows {0}, cols {1, 2, 3}: 2+3+4 = 9 over 3.
    // Window (1, *): both rows; (2, *): row 1.
    const Vec sums = {3, 9, 3 + 5 + 6, 9 + 6 + 7 + 8, 5 + 6, 6 + 7 + 8};
    const Vec counts = {2, 3, 4, 6, 2, 3};
    for (size_t i = 0; i < 6; ++i)
      EXPECT_DOUBLE_EQ(y[i], sums[i] / (include ? 6.0 : counts[i])) << i << " " << include;
  }
}

TEST(AvgPool2d, GradientSatisfiesAdjointIdentity) {
  std::mt19937 rng(8);
  for (bool include : {true, false})
    for (const Pool2dGeom& g : {pool_geom(2, 3, 7, 6, 3, 3, 2, 2, 1, 1, include),
                                pool_geom(1, 2, 5, 8, 2, 3, 1, 2, 1, 1, include),
                                pool_geom(2, 1, 6, 6, 2, 2, 2, 2, 0, 0, include)}) {
      const Vec x = random_vec(in_size(g), rng), dy = random_vec(out_size(g), rng);
      Vec y(size_t(out_size(g))), dx(x.size(), 5.0);
      avg_pool2d_ref(g, x.data(), y.data());
      avg_pool2d_grad_ref(g, dy.data(), dx.data());
      EXPECT_NEAR(dot(y, dy), dot(x, dx), 1e-12) << include;
    }
}

TEST(AvgPool2d, GradientSpreadsOverWindowWithDivisor) {
  // 3x3 windows with padding 1 over a 2x2 plane: the one window (stride 2)
  // covers everything; dy = 9 spreads as 9/9 or 9/4.
  for (bool include : {true, false}) {
    const Pool2dGeom g = pool_geom(1, 1, 2, 2, 3, 3, 2, 2, 1, 1, include);
    ASSERT_EQ(g.oh, 1);
    const Vec dy = {9};
    Vec dx(4);
    avg_pool2d_grad_ref(g, dy.data(), dx.data());
    EXPECT_EQ(dx, Vec(4, include ? 1.0 : 2.25));
  }
}

TEST(Pool2d, FloatInstantiationsMatchDouble) {
  std::mt19937 rng(9);
  const Pool2dGeom g = pool_geom(2, 2, 6, 5, 3, 2, 2, 1, 1, 1, false);
  const Vec x = random_vec(in_size(g), rng);
  Vec ym(size_t(out_size(g))), ya(ym.size());
  std::vector<float> ymf(ym.size()), yaf(ym.size());
  max_pool2d_ref(g, x.data(), ym.data());
  avg_pool2d_ref(g, x.data(), ya.data());
  max_pool2d_ref(g, to_f32(x).data(), ymf.data());
  avg_pool2d_ref(g, to_f32(x).data(), yaf.data());
  expect_close(ymf, ym, 1e-6, "max");
  expect_close(yaf, ya, 1e-6, "avg");
}

// ---------------------------------------------------------------------------
// Gather / scatter.

const SourceLoc kLoc{"model.cpp", 12};

TEST(GatherRows, CopiesIndexedRows) {
  const std::vector<float> table = {0, 1, 10, 11, 20, 21, 30, 31};
  const std::vector<int64_t> idx = {2, 0, 2, 3};
  std::vector<float> out(8);
  gather_rows(table.data(), 4, 2, idx.data(), 4, out.data(), kLoc);
  EXPECT_EQ(out, (std::vector<float>{20, 21, 0, 1, 20, 21, 30, 31}));
}

TEST(GatherRows, OutOfRangeIndexNamesIndexPositionRowsAndLocation) {
  const Vec table(256 * 2, 1.0);
  std::vector<int64_t> idx = {0, 1, 2, 3, 4, 300, -1};
  Vec out(14, -3.0);
  EXPECT_EQ(testing::error_of(
                [&] { gather_rows(table.data(), 256, 2, idx.data(), 7, out.data(), kLoc); }),
            "index 300 at position 5 is out of range [0, 256)"
            " (an embedding's ids, or a gather's indices: -1 where an index was out of its dim's "
            "range) (at model.cpp:12)");
  EXPECT_EQ(out, Vec(14, -3.0)) << "nothing is written before the check";
  idx[5] = 7;
  EXPECT_EQ(
      testing::error_of(
          [&] { gather_rows(table.data(), 256, 2, idx.data(), 7, out.data(), SourceLoc{}); }),
      "index -1 at position 6 is out of range [0, 256)"
      " (an embedding's ids, or a gather's indices: -1 where an index was out of its dim's range)");
}

TEST(ScatterAddRows, ZeroesThenAddsDuplicateIndices) {
  const Vec src = {1, 2, 10, 20, 100, 200};
  const std::vector<int64_t> idx = {3, 0, 3};
  Vec out(8, 99.0);
  scatter_add_rows(src.data(), 2, idx.data(), 3, 4, out.data(), kLoc);
  EXPECT_EQ(out, (Vec{10, 20, 0, 0, 0, 0, 101, 202}));
}

TEST(ScatterAddRows, OutOfRangeIndexThrowsBeforeWriting) {
  const std::vector<float> src = {1, 2, 3};
  const std::vector<int64_t> idx = {0, 4, 1};
  std::vector<float> out(4, 7.0f);
  EXPECT_EQ(testing::error_of(
                [&] { scatter_add_rows(src.data(), 1, idx.data(), 3, 4, out.data(), kLoc); }),
            "index 4 at position 1 is out of range [0, 4)"
            " (an embedding's ids, or a gather's indices: -1 where an index was out of its dim's "
            "range) (at model.cpp:12)");
  EXPECT_EQ(out, std::vector<float>(4, 7.0f));
}

TEST(GatherScatter, ScatterIsAdjointOfGather) {
  std::mt19937 rng(10);
  const int64_t rows = 9, width = 5, n = 20;
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  std::vector<int64_t> idx(n);
  for (int64_t& i : idx) i = pick(rng);
  const Vec table = random_vec(rows * width, rng), dy = random_vec(n * width, rng);
  Vec y(size_t(n * width)), dt(size_t(rows * width));
  gather_rows(table.data(), rows, width, idx.data(), n, y.data(), kLoc);
  scatter_add_rows(dy.data(), width, idx.data(), n, rows, dt.data(), kLoc);
  EXPECT_NEAR(dot(y, dy), dot(table, dt), 1e-12);
}

// Many rows, few contributions (a cross-entropy's gradient over a
// vocabulary, written serially), and enough to be split by rows: every
// element is written, zeros where no index points, the contributions of a
// repeated index summed in order, on any team.
TEST(GatherScatter, ScatterOfFewIndicesIntoManyRowsWritesEveryRow) {
  std::mt19937 rng(12);
  struct Case {
    int64_t rows, n, width;
  };
  for (const auto& [rows, n, width] :
       {Case{100003, 300, 1}, Case{100003, 300, 3}, Case{2000, 1500, 200}}) {
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t& i : idx) i = int64_t(rng() % uint32_t(rows / 25)) * 25;  // repeats
    std::vector<float> src(static_cast<size_t>(n * width));
    for (float& v : src) v = float(rng() % 1000) / 7.0f;
    std::vector<float> want(size_t(rows * width), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < width; ++j)
        want[size_t(idx[size_t(i)] * width + j)] += src[size_t(i * width + j)];
    const int saved = num_threads();
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      std::vector<float> out(size_t(rows * width), std::nanf(""));
      scatter_add_rows(src.data(), width, idx.data(), n, rows, out.data(), kLoc);
      EXPECT_TRUE(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)) == 0)
          << "width " << width << ", " << threads << " threads";
    }
    set_num_threads(saved);
  }
}

// ---------------------------------------------------------------------------
// Sorting.

TEST(ArgsortRows, StableWithNanAboveEveryNumberBothWays) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Vec x = {2, nan, -1, 2, nan, -0.5, 2};
  std::vector<int64_t> up(7), down(7);
  argsort_rows(x.data(), 1, 7, 1, false, up.data());
  argsort_rows(x.data(), 1, 7, 1, true, down.data());
  EXPECT_EQ(up, (std::vector<int64_t>{2, 5, 0, 3, 6, 1, 4}));
  EXPECT_EQ(down, (std::vector<int64_t>{1, 4, 0, 3, 6, 5, 2}));
}

TEST(ArgsortRows, SortsAlongAMiddleAxisOfEveryRow) {
  // [2, 3, 2] sorted along its axis of 3: each (outer, inner) row alone
  const std::vector<float> x = {3, 0, 1, 5, 2, 4, 9, 6, 7, 8, 6, 6};
  std::vector<int64_t> out(12);
  argsort_rows(x.data(), 2, 3, 2, false, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{1, 0, 2, 2, 0, 1, 2, 0, 1, 2, 0, 1}));
}

// ---------------------------------------------------------------------------
// Philox.

struct PhiloxKat {
  uint32_t ctr[4], key[2], out[4];
};

TEST(Philox, MatchesRandom123KnownAnswers) {
  // Random123's tests/kat_vectors for philox4x32 with 10 rounds.
  const PhiloxKat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const PhiloxKat& k : kats) {
    uint32_t out[4];
    philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out[i], k.out[i]) << "word " << i << " of " << std::hex << k.ctr[0];
  }
}

TEST(Philox, UniformIsTopTwentyFourBitsOfFirstWord) {
  // seed 0, offset 0: counter {0, 0, 0, 0}, key {0, 0}.
  float f;
  double d;
  philox_uniform<float>(0, 0, &f, 1);
  philox_uniform<double>(0, 0, &d, 1);
  EXPECT_EQ(d, double(0x6627e8d5u >> 8) / 16777216.0);
  EXPECT_EQ(double(f), d);
  // seed and offset split into words: key {lo, hi}, counter {lo, hi, 0, 0}.
  const uint64_t seed = 0x299f31d0a4093822ull, offset = 0x85a308d3243f6a88ull;
  const uint32_t ctr[4] = {0x243f6a88u, 0x85a308d3u, 0, 0}, key[2] = {0xa4093822u, 0x299f31d0u};
  uint32_t out[4];
  philox4x32_10(ctr, key, out);
  philox_uniform<double>(seed, offset, &d, 1);
  EXPECT_EQ(d, double(out[0] >> 8) / 16777216.0);
}

TEST(Philox, DeterministicAndSeedDependent) {
  std::vector<float> a(1000), b(1000), c(1000);
  philox_uniform<float>(42, 7, a.data(), 1000);
  philox_uniform<float>(42, 7, b.data(), 1000);
  philox_uniform<float>(43, 7, c.data(), 1000);
  EXPECT_EQ(a, b);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, 5);
}

TEST(Philox, OffsetShiftsTheSequence) {
  const int64_t n = 500, k = 123;
  std::vector<double> base(n + k), shifted(n);
  philox_uniform<double>(9, 0, base.data(), n + k);
  philox_uniform<double>(9, k, shifted.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(shifted[size_t(i)], base[size_t(i + k)]) << i;
  // The counter carries into its high word.
  std::vector<double> across(4), pieces(4);
  const uint64_t near = 0xfffffffeull;
  philox_uniform<double>(9, near, across.data(), 4);
  for (int64_t i = 0; i < 4; ++i)
    philox_uniform<double>(9, near + uint64_t(i), &pieces[size_t(i)], 1);
  EXPECT_EQ(across, pieces);
}

TEST(Philox, RoughlyUniformInUnitInterval) {
  const int64_t n = 100000;
  std::vector<float> u(n);
  philox_uniform<float>(2024, 0, u.data(), n);
  double sum = 0, sq = 0;
  int64_t buckets[10] = {};
  for (float v : u) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    sum += v, sq += double(v) * v;
    ++buckets[int(v * 10)];
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.005);                                    // sd of the mean is ~0.0009
  EXPECT_NEAR(var, 1.0 / 12, 0.002);                                // uniform variance
  for (int64_t b : buckets) EXPECT_NEAR(double(b), n / 10.0, 500);  // sd ~95
}

}  // namespace
}  // namespace ws::exec
