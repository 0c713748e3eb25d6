// The fast max pooling (max_pool2d, max_pool2d_grad, and their NHWC
// kernels on the images transposed) against the reference kernels, bit for
// bit: ties (values from a few levels, zeros of both
// signs), NaNs, padding, overlapping and strided windows, odd sizes, rows
// wider than one chunk, on 1 and 2 threads.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "exec/nn_kernels.hpp"
#include "exec/threads.hpp"

namespace ws::exec {
namespace {

Pool2dGeom geom(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh,
                int64_t sw, int64_t ph, int64_t pw) {
  Pool2dGeom g{.n = n, .c = c, .h = h, .w = w, .kh = kh, .kw = kw};
  g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw;
  g.oh = (h + 2 * ph - kh) / sh + 1;
  g.ow = (w + 2 * pw - kw) / sw + 1;
  return g;
}

// Values from `levels` small integers (many ties), some -0.0, and NaNs with
// distinct payloads at rate `nan_rate`, so which NaN wins shows in the bits.
template <class T>
std::vector<T> tie_data(int64_t n, int levels, double nan_rate, std::mt19937& rng) {
  std::vector<T> v(static_cast<size_t>(n));
  std::uniform_int_distribution<int> level(-levels, levels);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t i = 0; i < n; ++i) {
    const int l = level(rng);
    if (u(rng) < nan_rate) {
      using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
      Bits b = std::bit_cast<Bits>(std::numeric_limits<T>::quiet_NaN()) | Bits(i & 0xff);
      v[size_t(i)] = std::bit_cast<T>(b);
    } else {
      v[size_t(i)] = l == 0 && (i & 1) ? T(-0.0) : T(l);
    }
  }
  return v;
}

template <class T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", reference " << b[i];
      return;
    }
}

// [n, c, h, w] stored [n, h, w, c], or back (to_nchw).
template <class T>
std::vector<T> nhwc(const std::vector<T>& v, int64_t n, int64_t c, int64_t h, int64_t w,
                    bool to_nchw) {
  std::vector<T> out(v.size());
  for (int64_t a = 0; a < n; ++a)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const size_t plain = size_t(((a * c + k) * h + y) * w + x),
                       last = size_t(((a * h + y) * w + x) * c + k);
          if (to_nchw)
            out[plain] = v[last];
          else
            out[last] = v[plain];
        }
  return out;
}

template <class T>
void check_geom(const Pool2dGeom& g, int levels, double nan_rate, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.c * g.oh * g.ow;
  const std::vector<T> x = tie_data<T>(nx, levels, nan_rate, rng);
  std::vector<T> dy(static_cast<size_t>(ny));
  std::uniform_real_distribution<double> u(-1, 1);
  for (T& v : dy) v = T(u(rng));  // inexact sums: the order of addition shows
  const std::string what =
      fmt::format("{}x{}x{}x{} k{}x{} s{}x{} p{}x{} levels {} nan {}", g.n, g.c, g.h, g.w, g.kh,
                  g.kw, g.sh, g.sw, g.ph, g.pw, levels, nan_rate);
  std::vector<T> y(static_cast<size_t>(ny)), y_ref(static_cast<size_t>(ny)),
      dx(static_cast<size_t>(nx), T(7)), dx_ref(static_cast<size_t>(nx));
  max_pool2d(g, x.data(), y.data());
  max_pool2d_ref(g, x.data(), y_ref.data());
  expect_same_bits(y, y_ref, "max_pool2d " + what);
  max_pool2d_grad(g, x.data(), dy.data(), dx.data());
  max_pool2d_grad_ref(g, x.data(), dy.data(), dx_ref.data());
  expect_same_bits(dx, dx_ref, "max_pool2d_grad " + what);
  // NHWC images: the same bits, transposed.
  Pool2dGeom last = g;
  last.layout = ir::ImageLayout::nhwc;
  const std::vector<T> x_last = nhwc(x, g.n, g.c, g.h, g.w, false);
  std::vector<T> y_last(y.size()), dx_last(dx.size(), T(7));
  max_pool2d_nhwc(last, x_last.data(), y_last.data());
  expect_same_bits(nhwc(y_last, g.n, g.c, g.oh, g.ow, true), y_ref, "max_pool2d_nhwc " + what);
  max_pool2d_grad_nhwc(last, x_last.data(), nhwc(dy, g.n, g.c, g.oh, g.ow, false).data(),
                       dx_last.data());
  expect_same_bits(nhwc(dx_last, g.n, g.c, g.h, g.w, true), dx_ref, "max_pool2d_grad_nhwc " + what);
}

template <class T>
void check_all() {
  const Pool2dGeom geoms[] = {
      geom(8, 64, 32, 32, 3, 3, 2, 2, 1, 1),  // resnet's stem pooling
      geom(2, 3, 7, 9, 3, 3, 1, 1, 1, 1),     // stride 1: heavy overlap
      geom(2, 3, 9, 7, 3, 2, 2, 1, 1, 1),     // non-square kernel and stride
      geom(1, 2, 11, 13, 5, 5, 3, 3, 2, 2),   // stride 3, wide padding
      geom(1, 2, 5, 5, 2, 2, 2, 2, 0, 0),     // disjoint windows
      geom(1, 1, 1, 1, 1, 1, 1, 1, 0, 0),     // a single element
      geom(1, 1, 3, 3, 3, 3, 1, 1, 1, 1),     // every window clipped
      geom(1, 2, 5, 600, 3, 3, 1, 1, 1, 1),   // rows of several chunks, stride 1
      geom(1, 2, 4, 1201, 3, 4, 1, 2, 1, 2),  // several chunks, stride 2
      geom(1, 1, 6, 7, 1, 3, 1, 3, 0, 1),     // one-row windows
      geom(2, 300, 5, 6, 3, 3, 2, 2, 1, 1),   // channels past a run of them
  };
  uint32_t seed = 1;
  for (const Pool2dGeom& g : geoms)
    for (int levels : {0, 1, 3, 1000})
      for (double nan_rate : {0.0, 0.05, 0.5}) check_geom<T>(g, levels, nan_rate, seed++);
}

TEST(MaxPool2dFast, FloatMatchesReferenceBits) {
  for (int threads : {1, 2}) {
    TeamScope team(threads);
    check_all<float>();
  }
}

TEST(MaxPool2dFast, DoubleMatchesReferenceBits) {
  for (int threads : {1, 2}) {
    TeamScope team(threads);
    check_all<double>();
  }
}

}  // namespace
}  // namespace ws::exec
